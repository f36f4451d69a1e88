// The wgmma building block's device check (m3_wgmma.cuh), compiled and launched by the tests only.
#pragma once

#include "m3_wgmma.cuh"

// The layout's device check: one warpgroup computes d(64 x 64) = reps * a b^T for row-major
// a (64 x K) and b (64 x K), K = M3_WGMMA_PROBE_K. The C++ GPU test compares it with the product of
// the tf32-truncated inputs; `reps` > 1 times the product's steady state.
#ifndef M3_WGMMA_PROBE_K
#define M3_WGMMA_PROBE_K 128
#endif
extern "C" __global__ void __launch_bounds__(128) m3_wgmma_probe_tf32(const float* a, const float* b, float* d,
                                                                      int reps) {
  constexpr int K = M3_WGMMA_PROBE_K;
  extern __shared__ float4 probe_smem[];
  // Dynamic shared memory is only 16-byte aligned: the launch asks for 1 KB more.
  const unsigned raw = static_cast<unsigned>(__cvta_generic_to_shared(probe_smem));
  float* ta = reinterpret_cast<float*>(probe_smem) + ((1024 - (raw & 1023)) & 1023) / 4;
  float* tb = ta + 64 * K;
  m3wg::stage_sw128<64, K, 128>(a, ta);
  m3wg::stage_sw128<64, K, 128>(b, tb);
  m3wg::fence_shared_for_async_proxy();
  __syncthreads();

  const unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(ta));
  const unsigned sb = static_cast<unsigned>(__cvta_generic_to_shared(tb));
  float acc[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) acc[i] = 0.f;
  for (int rep = 0; rep < reps; ++rep) {
    m3wg::wgmma_fence();
#pragma unroll
    for (int s = 0; s < K / 8; ++s) {
      m3wg::wgmma_m64n64k8_tf32(acc, m3wg::sw128_kstep(sa, 64, s), m3wg::sw128_kstep(sb, 64, s), true);
    }
    m3wg::wgmma_commit();
    m3wg::wgmma_wait<0>();
  }

  m3wg::store_accumulator<64>(acc, d + static_cast<long long>(blockIdx.x) * 64 * 64, 64);
}
