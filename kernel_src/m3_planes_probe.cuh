// The plane products' device check and timing (m3_planes.cuh), compiled and launched by the tests
// only.
//
// d (64 x 128, row-major, one per CTA) = reps * a b for a (64 x 32) and b (32 x 128) handed over in
// fp32 in their stored orientation: a as [m][k] or, "at", [k][m]; b as [n][k] or, "bt", [k][n].
// The update of the backward's state gradient, sum_t (e dy)[t][p] qr[t][n], has this shape with
// both operands stored token-major (at, bt). m3_planes_probe_tf32_at_bt computes that product the
// way the default kernels do (MmaTile::mac: tf32, both operands loaded one element at a time from
// fp32 tiles), for timing side by side; `reps` > 1 repeats the product from the same tiles.
//
// m3_planes_core_probe runs the backward's whole product core (m3_planes_core.cuh) for one chunk and
// head per CTA and repetition, staging included, on the same inputs (in L2 after the first CTA), each
// CTA writing its own outputs: two CTAs an SM time a job's products as the backward would pair them.
#pragma once

#include "m3_planes_core.cuh"

namespace m3pl {

constexpr int kProbeM = 64, kProbeN = 128, kProbeK = 32;

template <bool kATrans, bool kBTrans, int kMode>
M3_DEV void probe_planes(const float* a, const float* b, float* d, int reps) {
  constexpr int M = kProbeM, N = kProbeN, K = kProbeK;
  constexpr int ARows = kATrans ? K : M, ACols = kATrans ? M : K;
  constexpr int BRows = kBTrans ? K : N, BCols = kBTrans ? N : K;
  using AS = PlaneShape<ARows, ACols>;
  using BS = PlaneShape<BRows, BCols>;
  extern __shared__ float4 probe_smem[];
  m3_bf16* a_hi = reinterpret_cast<m3_bf16*>(probe_smem);
  m3_bf16* a_lo = a_hi + AS::kElems;
  m3_bf16* b_hi = a_lo + AS::kElems;
  m3_bf16* b_lo = b_hi + BS::kElems;
  stage_planes_rows<ARows, ACols, true>(a, a_hi, a_lo);
  stage_planes_rows<BRows, BCols, true>(b, b_hi, b_lo);
  __syncthreads();
  PlaneTile<M, N> tile;
  for (int rep = 0; rep < reps; ++rep) {
    asm volatile("" ::: "memory");  // every repetition loads its fragments again
    tile.template mac<K, kATrans, kBTrans, kMode>(a_hi, a_lo, AS::kLd, b_hi, b_lo, BS::kLd);
  }
  float* out = d + static_cast<long long>(blockIdx.x) * M * N;
  tile.for_each_pair([&](int r, int c, float x0, float x1) {
    *reinterpret_cast<float2*>(out + r * N + c) = make_float2(x0, x1);
  });
}

// The default kernels' way (tf32, element loads), tiles padded by 4 words a row as theirs.
M3_DEV void probe_tf32_at_bt(const float* a, const float* b, float* d, int reps) {
  constexpr int M = kProbeM, N = kProbeN, K = kProbeK, LDA = M + 4, LDB = N + 4;
  extern __shared__ float4 probe_smem[];
  float* ta = reinterpret_cast<float*>(probe_smem);
  float* tb = ta + K * LDA;
  float* e = tb + K * LDB;
  for (int i = threadIdx.x; i < K * M; i += blockDim.x) ta[(i / M) * LDA + i % M] = a[i];
  for (int i = threadIdx.x; i < K * N; i += blockDim.x) tb[(i / N) * LDB + i % N] = b[i];
  if (threadIdx.x < K) e[threadIdx.x] = 1.f;  // the update scales dy by e[t] in its A loads
  __syncthreads();
  MmaTile<M, N, 256> tile;
  for (int rep = 0; rep < reps; ++rep) {
    asm volatile("" ::: "memory");
    tile.template mac<K>([&](int r, int k) { return e[k] * ta[k * LDA + r]; },
                         [&](int k, int c) { return tb[k * LDB + c]; });
  }
  float* out = d + static_cast<long long>(blockIdx.x) * M * N;
  tile.for_each_pair([&](int r, int c, float x0, float x1) {
    *reinterpret_cast<float2*>(out + r * N + c) = make_float2(x0, x1);
  });
}

}  // namespace m3pl

#define M3_PLANES_PROBE(name, at, bt, mode)                                                              \
  extern "C" __global__ void __launch_bounds__(256) name(const float* a, const float* b, float* d, int reps) { \
    m3pl::probe_planes<at, bt, mode>(a, b, d, reps);                                                     \
  }
M3_PLANES_PROBE(m3_planes_probe_a_b, false, false, m3pl::kSplitBoth)
M3_PLANES_PROBE(m3_planes_probe_at_b, true, false, m3pl::kSplitBoth)
M3_PLANES_PROBE(m3_planes_probe_a_bt, false, true, m3pl::kSplitBoth)
M3_PLANES_PROBE(m3_planes_probe_at_bt, true, true, m3pl::kSplitBoth)
M3_PLANES_PROBE(m3_planes_probe_at_bt_one, true, true, m3pl::kSplitA)
#undef M3_PLANES_PROBE

extern "C" __global__ void __launch_bounds__(256) m3_planes_probe_tf32_at_bt(const float* a, const float* b, float* d,
                                                                             int reps) {
  m3pl::probe_tf32_at_bt(a, b, d, reps);
}

#if M3_PLANES_FP16
#include "m3_planes_core64.cuh"
#endif

namespace m3pl {

// in: qr, ks (C x N), dy, v (C x P), st, ds (P x N), cl (C), contiguous in that order; out: per CTA
// dqr, dks (C x N), dv (C x P), upd (P x N), row_g, col_g (C), contiguous in that order.
// products_only != 0 stages once and repeats only the products and their stores (dS not restaged:
// timing only), so that a job's time splits into its staging and its products.
// The core of chunk C: its staging, then its mixing and products.
template <int C>
M3_DEV void core_stage(const CoreInputs& in, const CorePlanes& s) {
  if constexpr (C == kCoreC) stage_core(in, s);
#if M3_PLANES_FP16
  else stage_core64(in, s);
#endif
}
template <int C, bool kRestage>
M3_DEV void core_all_products(const CoreInputs& in, const CorePlanes& s, const CoreOutputs& out) {
  constexpr bool kMixing = (M3_CORE_ABLATE & 2) == 0, kStateProducts = (M3_CORE_ABLATE & 4) == 0;
  if constexpr (C == kCoreC) {
    if constexpr (kMixing) core_mixing(s, out);
    if constexpr (kStateProducts) core_products<kRestage>(in, s, out);
  }
#if M3_PLANES_FP16
  else {
    if constexpr (kMixing) core64_mixing(s, out);
    if constexpr (kStateProducts) core64_products<kRestage>(in, s, out);
  }
#endif
}

template <int C>
M3_DEV void probe_core(const float* in, float* out, int reps, int products_only) {
  extern __shared__ float4 probe_smem[];
  const CorePlanes s{reinterpret_cast<char*>(probe_smem)};
  constexpr int CN = C * kCoreN, CP = C * kCoreP, PN = kCoreP * kCoreN;
  const CoreInputs ci{in, in + CN, in + 2 * CN, in + 2 * CN + CP, in + 2 * CN + 2 * CP, in + 2 * CN + 2 * CP + PN,
                      in + 2 * CN + 2 * CP + 2 * PN};
  float* o = out + static_cast<long long>(blockIdx.x) * (2 * CN + CP + PN + 2 * C);
  const CoreOutputs co{o, o + CN, o + 2 * CN, o + 2 * CN + CP, o + 2 * CN + CP + PN, o + 2 * CN + CP + PN + C};
  if (products_only) {
    core_stage<C>(ci, s);
    for (int rep = 0; rep < reps; ++rep) {
      core_all_products<C, false>(ci, s, co);
      __syncthreads();
    }
    return;
  }
  for (int rep = 0; rep < reps; ++rep) {
    core_stage<C>(ci, s);
    core_all_products<C, true>(ci, s, co);
    __syncthreads();  // the next repetition's staging overwrites the planes
  }
}

}  // namespace m3pl

extern "C" __global__ void __launch_bounds__(256, 2) m3_planes_core_probe(const float* in, float* out, int reps,
                                                                         int products_only) {
  m3pl::probe_core<m3pl::kCoreC>(in, out, reps, products_only);
}
static_assert(m3pl::CoreLayout::total == 105472, "tests/cpp/test_gpu.cpp's kCoreSmem is this layout's size");

#if M3_PLANES_FP16
// The chunk-64 core (fp16 planes only).
extern "C" __global__ void __launch_bounds__(256, 2) m3_planes_core64_probe(const float* in, float* out, int reps,
                                                                           int products_only) {
  m3pl::probe_core<m3pl::kCore64C>(in, out, reps, products_only);
}
static_assert(m3pl::Core64Layout::total == 110112, "tests/cpp/test_gpu.cpp's kCore64Smem is this layout's size");
#endif
