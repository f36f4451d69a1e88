// The backward's tile products for one chunk of 32 tokens and one head, on bf16 planes: the core a
// rewritten backward job would run between its staging and its per-token epilogue, built on its own
// so that its cost can be measured before anything is built around it (m3_planes_core_probe).
//
// From staged planes of qr, ks ([t][n]), dy, e dy, v ([t][p]), the entering state S and the
// leaving state's gradient dS ([p][n]), and the in-chunk log decays cl[t] (e = exp(cl), w =
// exp(cl[C-1] - cl)), it forms (VJP.md's chunked form, W[t][s] = exp(cl[t] - cl[s]) for s <= t):
//   Mw = W * (qr ks^T), dM = dy v^T, dMW = W * dM, row and column sums of G = dM * Mw;
//   dqr = dMW ks + (e dy) S;   dks = dMW^T qr + w * (v dS);   dv = Mw^T dy + w * (ks dS^T);
//   U = (e dy)^T qr (the chunk's share of the entering state's gradient).
// Per product, how many planes each operand brings (m3_planes.cuh), from the thirty-eighth
// session's precision study (methods/precision_study.py, product by product): all three terms for
// the scores, their two backward products, (e dy) S and U; v dS takes dS's two planes (v is exact
// in bf16, so that is as good as three); dM takes dy's two; Mw^T dy and ks dS^T keep one plane of
// dy and of dS. On c02, the panel's worst case for it, that mix leaves dangles at the float64
// floor (1.70e-3) and dv at 2.37e-3; the cheapest mix tried (one plane for every state operand)
// reached 4.35e-3 there.
// S and dS share one pair of planes: (e dy) S runs first, then U, then dS is staged over S for
// v dS and ks dS^T: the order a job meets them in, since dS comes from the next chunk's job. That
// keeps both states' two planes inside two CTAs an SM.
// The scores and dM run at once on two groups of four warps; the five state-sized products on all
// eight, one after the other, each written out before the next so that no two tiles of
// accumulators are live together.
#pragma once

#include "m3_planes.cuh"

namespace m3pl {

constexpr int kCoreC = 32, kCoreN = 128, kCoreP = 64;

// Byte offsets of the planes and the fp32 scratch in the core's shared memory.
struct CoreLayout {
  using Q = PlaneShape<kCoreC, kCoreN>;  // qr, ks
  using T = PlaneShape<kCoreC, kCoreP>;  // dy, e dy, v
  using S = PlaneShape<kCoreP, kCoreN>;  // S, dS
  using X = PlaneShape<kCoreC, kCoreC>;  // Mw, dMW
  static constexpr int kQ = Q::kElems * 2, kT = T::kElems * 2, kS = S::kElems * 2, kX = X::kElems * 2;
  static constexpr int kDmLd = kCoreC + 1;
  static constexpr int qr_hi = 0, qr_lo = qr_hi + kQ, ks_hi = qr_lo + kQ, ks_lo = ks_hi + kQ;
  static constexpr int dy_hi = ks_lo + kQ, dy_lo = dy_hi + kT, edy_hi = dy_lo + kT, edy_lo = edy_hi + kT;
  static constexpr int v_hi = edy_lo + kT, state_hi = v_hi + kT, state_lo = state_hi + kS;  // S, then dS
  static constexpr int mw_hi = state_lo + kS, dmw_hi = mw_hi + kX, dmw_lo = dmw_hi + kX;
  static constexpr int dm = dmw_lo + kX;                    // fp32 [t][s], the dM group's hand-over
  static constexpr int vec = dm + kCoreC * kDmLd * 4;        // fp32 cl, e, w
  static constexpr int part = vec + 3 * kCoreC * 4;          // fp32 G partial sums: 2 rows of C each
  static constexpr int total = part + 4 * kCoreC * 4;
  static_assert(vec % 16 == 0 && total <= 110 * 1024, "two CTAs an SM");
};

struct CorePlanes {
  char* base;
  M3_DEV m3_bf16* at(int offset) const { return reinterpret_cast<m3_bf16*>(base + offset); }
  M3_DEV float* f32(int offset) const { return reinterpret_cast<float*>(base + offset); }
};

// Timing ablations of the probes (results wrong): bit 0 keeps the outputs' stores from being
// issued, bit 1 skips the mixing (scores, dM, G), bit 2 the state-sized products.
#ifndef M3_CORE_ABLATE
#define M3_CORE_ABLATE 0
#endif

// Product modes (SplitMode), overridable for the precision and timing comparisons of the probe.
#ifndef M3_CORE_INTER_MODE
#define M3_CORE_INTER_MODE kSplitBoth  // dqr's (e dy) S
#endif
#ifndef M3_CORE_UPDATE_MODE
#define M3_CORE_UPDATE_MODE kSplitBoth  // U's (e dy)^T qr
#endif
#ifndef M3_CORE_STATE_V_MODE
#define M3_CORE_STATE_V_MODE kSplitB  // dks's v dS: v exact, dS in two planes
#endif
#ifndef M3_CORE_STATE_KS_MODE
#define M3_CORE_STATE_KS_MODE kSplitA  // dv's ks dS^T: ks in two planes, dS in one
#endif

// Four adjacent elements into planes at element `at`: hi, and under kLo lo.
template <bool kLo>
M3_DEV void put_split4(float4 x, m3_bf16* hi, m3_bf16* lo, int at) {
  unsigned h0, l0, h1, l1;
  split_pair(x.x, x.y, h0, l0);
  split_pair(x.z, x.w, h1, l1);
  *reinterpret_cast<uint2*>(hi + at) = make_uint2(h0, h1);
  if constexpr (kLo && !kPlanesFp16) *reinterpret_cast<uint2*>(lo + at) = make_uint2(l0, l1);
}

// The core's block: PlaneTile's default 2 x 4 warps.
constexpr int kCoreThreads = 256;

// The thread index read where it is used: from threadIdx.x ptxas hoists every staging address out of
// a loop over jobs and spills them (160 bytes of stack in the repeated probe).
M3_DEV int core_tid() {
  int tid;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid));
  return tid;
}

// A thread's share of a rows x cols fp32 tile (row-major), held in registers from its loads to its
// split, so that the loads of several tiles leave together: run 165 timed 20 us a job when each
// float4 waited for the split of the one before (28 round trips to L2 a thread).
template <int ROWS, int COLS>
struct RowsInFlight {
  static_assert(ROWS * COLS / 4 % kCoreThreads == 0, "every thread holds the same number of float4");
  static constexpr int kCount = ROWS * COLS / 4 / kCoreThreads;
  // Rows i * kRowStep apart from the thread's first: one base address a tile and immediate offsets
  // (an address a float4 took 70 spilled words in a repeated probe).
  static constexpr int kRowStep = 4 * kCoreThreads / COLS;
  static_assert(4 * kCoreThreads % COLS == 0, "a thread keeps its column");
  float4 x[kCount];
  static M3_DEV int row(int i) { return 4 * core_tid() / COLS + i * kRowStep; }
  static M3_DEV int col() { return 4 * core_tid() % COLS; }
  M3_DEV void load(const float* src) {
    const float4* at = reinterpret_cast<const float4*>(src + row(0) * COLS + col());
#pragma unroll
    for (int i = 0; i < kCount; ++i) x[i] = __ldg(at + i * kCoreThreads);
  }
  // Into a hi plane and, under kLo, a lo plane.
  template <bool kLo>
  M3_DEV void put(m3_bf16* hi, m3_bf16* lo) const {
    constexpr int kLd = PlaneShape<ROWS, COLS>::kLd;
    const int at = row(0) * kLd + col();
#pragma unroll
    for (int i = 0; i < kCount; ++i) put_split4<kLo>(x[i], hi, lo, at + i * kRowStep * kLd);
  }
};

// rows x cols fp32 into a hi plane and, under kLo, a lo plane (a block of kCoreThreads).
template <int ROWS, int COLS, bool kLo>
M3_DEV void stage_planes_rows(const float* src, m3_bf16* hi, m3_bf16* lo) {
  RowsInFlight<ROWS, COLS> rows;
  rows.load(src);
  rows.template put<kLo>(hi, lo);
}

// dy into its planes and e dy into its own (the update and the inter product contract e dy over t).
M3_DEV void put_dy(const RowsInFlight<kCoreC, kCoreP>& dy, const float* e, const CorePlanes& s) {
  using L = CoreLayout;
  constexpr int kLd = L::T::kLd;
#pragma unroll
  for (int i = 0; i < dy.kCount; ++i) {
    const int r = dy.row(i), at = r * kLd + dy.col();
    const float4 x = dy.x[i];
    const float er = e[r];
    put_split4<true>(x, s.at(L::dy_hi), s.at(L::dy_lo), at);
    put_split4<true>(make_float4(er * x.x, er * x.y, er * x.z, er * x.w), s.at(L::edy_hi), s.at(L::edy_lo), at);
  }
}

struct CoreInputs {
  const float* qr;  // [C][N]
  const float* ks;  // [C][N]
  const float* dy;  // [C][P]
  const float* v;   // [C][P], values exact in bf16
  const float* st;  // [P][N]
  const float* ds;  // [P][N]
  const float* cl;  // [C]
};

struct CoreOutputs {
  float* dqr;    // [C][N]
  float* dks;    // [C][N]
  float* dv;     // [C][P]
  float* upd;    // [P][N]
  float* row_g;  // [C]
  float* col_g;  // [C]
};

M3_DEV void stage_core(const CoreInputs& in, const CorePlanes& s) {
  using L = CoreLayout;
  RowsInFlight<kCoreC, kCoreN> qr, ks;
  RowsInFlight<kCoreC, kCoreP> v, dy;
  RowsInFlight<kCoreP, kCoreN> st;
  float* vec = s.f32(L::vec);
  if (threadIdx.x < kCoreC) {
    const float c = in.cl[threadIdx.x];
    vec[threadIdx.x] = c;
    vec[kCoreC + threadIdx.x] = __expf(c);
    vec[2 * kCoreC + threadIdx.x] = __expf(in.cl[kCoreC - 1] - c);
  }
  // Two rounds of loads, the second leaving while the first is split: 20 float4 a thread at once
  // would not fit beside the addresses in 128 registers.
  st.load(in.st);
  v.load(in.v);
  dy.load(in.dy);
  st.put<true>(s.at(L::state_hi), s.at(L::state_lo));
  qr.load(in.qr);
  ks.load(in.ks);
  v.put<false>(s.at(L::v_hi), nullptr);
  qr.put<true>(s.at(L::qr_hi), s.at(L::qr_lo));
  ks.put<true>(s.at(L::ks_hi), s.at(L::ks_lo));
  __syncthreads();  // e, before e dy
  put_dy(dy, vec + kCoreC, s);
  __syncthreads();
}

// Mw and dMW as planes, and the row and column sums of G = dM * Mw, from the scores (warps 0-3)
// and dM (warps 4-7), each group a 2 x 2 layout of 16 x 16 pieces: warp w + 4 holds dM where warp
// w holds the scores, and hands them over through shared memory.
M3_DEV void core_mixing(const CorePlanes& s, const CoreOutputs& out) {
  using L = CoreLayout;
  const int warp = threadIdx.x >> 5, group_warp = warp & 3;
  PlaneTile<kCoreC, kCoreC, 2, 2> tile(group_warp);
  float* dm = s.f32(L::dm);
  if (warp < 4) {
    tile.template mac<kCoreN, false, false, kSplitBoth>(s.at(L::qr_hi), s.at(L::qr_lo), L::Q::kLd, s.at(L::ks_hi),
                                                        s.at(L::ks_lo), L::Q::kLd);
  } else {
    // v is exact in bf16: dy's second plane makes the product as good as all three terms.
    tile.template mac<kCoreP, false, false, kSplitA>(s.at(L::dy_hi), s.at(L::dy_lo), L::T::kLd, s.at(L::v_hi),
                                                     nullptr, L::T::kLd);
    tile.for_each_pair([&](int r, int c, float x0, float x1) {
      dm[r * L::kDmLd + c] = x0;
      dm[r * L::kDmLd + c + 1] = x1;
    });
  }
  __syncthreads();
  float* part = s.f32(L::part);
  if (warp < 4) {
    const float* cl = s.f32(L::vec);
    constexpr int kLd = L::X::kLd;
    float row[2] = {0.f, 0.f}, col[2][2] = {};
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = tile.m0 + tile.g + 8 * h, c = tile.n0 + 8 * j + 2 * tile.t;
        float mw[2], dmw[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float w = c + e <= r ? __expf(cl[r] - cl[c + e]) : 0.f;
          const float d = dm[r * L::kDmLd + c + e];
          mw[e] = w * tile.acc[0][j][2 * h + e];
          dmw[e] = w * d;
          const float gv = d * mw[e];
          row[h] += gv;
          col[j][e] += gv;
        }
        unsigned hi, lo;
        split_pair(mw[0], mw[1], hi, lo);
        *reinterpret_cast<unsigned*>(s.at(L::mw_hi) + r * kLd + c) = hi;
        split_pair(dmw[0], dmw[1], hi, lo);
        *reinterpret_cast<unsigned*>(s.at(L::dmw_hi) + r * kLd + c) = hi;
        if constexpr (!kPlanesFp16) *reinterpret_cast<unsigned*>(s.at(L::dmw_lo) + r * kLd + c) = lo;
      }
    // Rows over the quad's lanes (t), columns over the eight row groups (g): fixed orders.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row[h] += __shfl_xor_sync(0xffffffffu, row[h], 1);
      row[h] += __shfl_xor_sync(0xffffffffu, row[h], 2);
    }
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e)
#pragma unroll
        for (int o = 4; o < 32; o <<= 1) col[j][e] += __shfl_xor_sync(0xffffffffu, col[j][e], o);
    const int wn = group_warp & 1, wm = group_warp >> 1;
    if (tile.t == 0) {
      part[wn * kCoreC + tile.m0 + tile.g] = row[0];
      part[wn * kCoreC + tile.m0 + tile.g + 8] = row[1];
    }
    if (tile.g == 0) {
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) part[(2 + wm) * kCoreC + tile.n0 + 8 * j + 2 * tile.t + e] = col[j][e];
    }
  }
  __syncthreads();
  if (threadIdx.x < kCoreC) {
    const int i = threadIdx.x;
    out.row_g[i] = part[i] + part[kCoreC + i];
    out.col_g[i] = part[2 * kCoreC + i] + part[3 * kCoreC + i];
  }
}

// out (rows x ld, row-major) = ka a + row_scale[row] kb b for two tiles of one layout (b may be
// null; row_scale null reads as 1). ka and kb undo the operands' scales of half planes (1 otherwise).
template <class TileT>
M3_DEV void store_tiles(const TileT& a, const TileT* b, const float* row_scale, float* out, int ld, float ka = 1.f,
                        float kb = 1.f) {
#pragma unroll
  for (int i = 0; i < TileT::MT; ++i)
#pragma unroll
    for (int j = 0; j < TileT::NTL; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = a.m0 + 16 * i + a.g + 8 * h, c = a.n0 + 8 * j + 2 * a.t;
        float x0 = ka * a.acc[i][j][2 * h], x1 = ka * a.acc[i][j][2 * h + 1];
        if (b) {
          const float f = (row_scale ? row_scale[r] : 1.f) * kb;
          x0 = fmaf(f, b->acc[i][j][2 * h], x0);
          x1 = fmaf(f, b->acc[i][j][2 * h + 1], x1);
        }
#if M3_CORE_ABLATE & 1
        // Timing only: the results computed, their stores (almost) never issued.
        if (x0 == -1.25e-37f) *reinterpret_cast<float2*>(out + r * ld + c) = make_float2(x0, x1);
#else
        *reinterpret_cast<float2*>(out + r * ld + c) = make_float2(x0, x1);
#endif
      }
}

// The five state-sized products, each written out before the next starts; dS is staged over S
// between the two that read S or nothing of the states and the two that read dS. Under
// kRestage = false the state planes are read again as they are (the probe's timing of the products
// without the staging: the same instructions, wrong values).
template <bool kRestage = true>
M3_DEV void core_products(const CoreInputs& in, const CorePlanes& s, const CoreOutputs& out) {
  using L = CoreLayout;
  const float* w = s.f32(L::vec) + 2 * kCoreC;
  {
    PlaneTile<kCoreC, kCoreN> dqr;
    dqr.template mac<kCoreC, false, true, kSplitBoth>(s.at(L::dmw_hi), s.at(L::dmw_lo), L::X::kLd, s.at(L::ks_hi),
                                                      s.at(L::ks_lo), L::Q::kLd);
    dqr.template mac<kCoreP, false, true, M3_CORE_INTER_MODE>(s.at(L::edy_hi), s.at(L::edy_lo), L::T::kLd,
                                                              s.at(L::state_hi), s.at(L::state_lo), L::S::kLd);
    store_tiles(dqr, static_cast<const decltype(dqr)*>(nullptr), nullptr, out.dqr, kCoreN);
  }
  {
    PlaneTile<kCoreP, kCoreN> upd;
    upd.template mac<kCoreC, true, true, M3_CORE_UPDATE_MODE>(s.at(L::edy_hi), s.at(L::edy_lo), L::T::kLd,
                                                              s.at(L::qr_hi), s.at(L::qr_lo), L::Q::kLd);
    store_tiles(upd, static_cast<const decltype(upd)*>(nullptr), nullptr, out.upd, kCoreN);
  }
  RowsInFlight<kCoreP, kCoreN> ds;
  if constexpr (kRestage) ds.load(in.ds);  // travelling while the slowest warp finishes U
  __syncthreads();                         // every warp is done with S
  if constexpr (kRestage) ds.put<true>(s.at(L::state_hi), s.at(L::state_lo));
  __syncthreads();
  {
    PlaneTile<kCoreC, kCoreN> intra, state;
    intra.template mac<kCoreC, true, true, kSplitBoth>(s.at(L::dmw_hi), s.at(L::dmw_lo), L::X::kLd, s.at(L::qr_hi),
                                                       s.at(L::qr_lo), L::Q::kLd);
    state.template mac<kCoreP, false, true, M3_CORE_STATE_V_MODE>(s.at(L::v_hi), nullptr, L::T::kLd,
                                                                  s.at(L::state_hi), s.at(L::state_lo), L::S::kLd);
    store_tiles(intra, &state, w, out.dks, kCoreN);
  }
  {
    PlaneTile<kCoreC, kCoreP> intra, state;
    intra.template mac<kCoreC, true, true, kPlain>(s.at(L::mw_hi), nullptr, L::X::kLd, s.at(L::dy_hi), nullptr,
                                                   L::T::kLd);
    state.template mac<kCoreN, false, false, M3_CORE_STATE_KS_MODE>(s.at(L::ks_hi), s.at(L::ks_lo), L::Q::kLd,
                                                                    s.at(L::state_hi), s.at(L::state_lo), L::S::kLd);
    store_tiles(intra, &state, w, out.dv, kCoreP);
  }
}

}  // namespace m3pl
