// The wgmma building block's device check (m3_wgmma.cuh), compiled and launched by the tests only.
#pragma once

#include "m3_wgmma.cuh"

// One warpgroup computes d(64 x Cols) = reps * a b^T for row-major a (64 x K) and b (Cols x K),
// K = M3_WGMMA_PROBE_K, by one of the header's three products: both operands in shared memory
// (Cols 64 or 128), or a from registers (Cols 64). The C++ GPU test compares each with the product
// of the tf32-truncated inputs; `reps` > 1 times the product's steady state.
#ifndef M3_WGMMA_PROBE_K
#define M3_WGMMA_PROBE_K 128
#endif

namespace m3wg {

template <int Cols, bool AInRegisters>
M3_DEV void probe_product(const float* a, const float* b, float* d, int reps) {
  constexpr int K = M3_WGMMA_PROBE_K;
  extern __shared__ float4 probe_smem[];
  // Dynamic shared memory is only 16-byte aligned: the launch asks for 1 KB more.
  const unsigned raw = static_cast<unsigned>(__cvta_generic_to_shared(probe_smem));
  float* ta = reinterpret_cast<float*>(probe_smem) + ((1024 - (raw & 1023)) & 1023) / 4;
  float* tb = ta + 64 * K;
  if (!AInRegisters) stage_sw128<64, K, 128>(a, ta);
  stage_sw128<Cols, K, 128>(b, tb);
  // The register operand: warp w's thread (g, t) holds rows 16 w + g, + 8 at columns t, t + 4.
  const int w = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
  float af[AInRegisters ? K / 8 : 1][4];
  if (AInRegisters) {
#pragma unroll
    for (int s = 0; s < K / 8; ++s) {
      const float* ar = a + (16 * w + g) * K + 8 * s + t;
      af[s][0] = ar[0];
      af[s][1] = ar[8 * K];
      af[s][2] = ar[4];
      af[s][3] = ar[8 * K + 4];
    }
  }
  fence_shared_for_async_proxy();
  __syncthreads();

  const unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(ta));
  const unsigned sb = static_cast<unsigned>(__cvta_generic_to_shared(tb));
  float acc[Cols / 2];
#pragma unroll
  for (int i = 0; i < Cols / 2; ++i) acc[i] = 0.f;
  for (int rep = 0; rep < reps; ++rep) {
    wgmma_fence();
#pragma unroll
    for (int s = 0; s < K / 8; ++s) {
      if constexpr (AInRegisters) {
        wgmma_m64n64k8_tf32_rs(acc, af[s][0], af[s][1], af[s][2], af[s][3], sw128_kstep(sb, Cols, s));
      } else if constexpr (Cols == 128) {
        wgmma_m64n128k8_tf32(acc, sw128_kstep(sa, 64, s), sw128_kstep(sb, Cols, s));
      } else {
        wgmma_m64n64k8_tf32(acc, sw128_kstep(sa, 64, s), sw128_kstep(sb, Cols, s), true);
      }
    }
    wgmma_commit();
    wgmma_wait<0>();
  }
  store_accumulator<Cols>(acc, d + static_cast<long long>(blockIdx.x) * 64 * Cols, Cols);
}

}  // namespace m3wg

extern "C" __global__ void __launch_bounds__(128) m3_wgmma_probe_tf32(const float* a, const float* b, float* d,
                                                                      int reps) {
  m3wg::probe_product<64, false>(a, b, d, reps);
}
extern "C" __global__ void __launch_bounds__(128) m3_wgmma_probe_tf32_n128(const float* a, const float* b, float* d,
                                                                           int reps) {
  m3wg::probe_product<128, false>(a, b, d, reps);
}
extern "C" __global__ void __launch_bounds__(128) m3_wgmma_probe_tf32_rs(const float* a, const float* b, float* d,
                                                                         int reps) {
  m3wg::probe_product<64, true>(a, b, d, reps);
}
