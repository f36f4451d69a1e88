// The backward's tile products for one chunk of 64 tokens and one head, on fp16 planes (one plane an
// operand, M3_PLANES_FP16=1): the products of m3_planes_core.cuh at twice the chunk, laid out to fit
// two CTAs an SM, which neither fp32 tiles (about 256 KB) nor bf16 pairs (about 200 KB) could.
//
// The same outputs as the chunk-32 core (VJP.md's chunked form): Mw = W * (qr ks^T), dM = dy v^T,
// dMW = W * dM, G's row and column sums, dqr = dMW ks + (e dy) S, U = (e dy)^T qr,
// dks = dMW^T qr + (w v) dS, dv = Mw^T dy + w * (ks dS^T). Two things differ from the chunk-32 core:
// - The scores and dM are split by rows, not by product: each group of four warps forms both for
//   its 32 rows, so G = dM * Mw is taken from registers and no fp32 dM is handed over (16 KB saved);
//   the first group's rows see no column past 31, so two of its warps skip both products.
// - w v is staged as a plane of its own, so dks is one accumulator tile, not two (its 64 x 128
//   tiles would hold 64 accumulators a thread); dv keeps two 64 x 64 tiles and scales at the store.
#pragma once

#include "m3_planes_core.cuh"

#if !M3_PLANES_FP16
#error "m3_planes_core64.cuh is laid out for one fp16 plane an operand (M3_PLANES_FP16=1)"
#endif

namespace m3pl {

constexpr int kCore64C = 64;

// Byte offsets in the chunk-64 core's shared memory.
struct Core64Layout {
  using Q = PlaneShape<kCore64C, kCoreN>;  // qr, ks, the state planes (S, then dS): 64 x 128
  using T = PlaneShape<kCore64C, kCoreP>;  // dy, e dy, v, w v, Mw, dMW: 64 x 64
  static_assert(kCore64C == kCoreP, "Mw and dMW share the 64 x 64 plane shape of dy and v");
  static constexpr int kQ = Q::kElems * 2, kT = T::kElems * 2;
  static constexpr int qr = 0, ks = qr + kQ, state = ks + kQ;
  static constexpr int dy = state + kQ, edy = dy + kT, v = edy + kT, wv = v + kT, mw = wv + kT, dmw = mw + kT;
  static constexpr int vec = dmw + kT;                       // fp32 cl, e, w
  static constexpr int row_part = vec + 3 * kCore64C * 4;    // fp32 [warp of a group][row]
  static constexpr int col_part = row_part + 4 * kCore64C * 4;  // fp32 [group][column]
  static constexpr int total = col_part + 2 * kCore64C * 4;
  // Two CTAs an SM: 228 KB less 1 KB reserved for each.
  static_assert(vec % 16 == 0 && 2 * (total + 1024) <= 228 * 1024, "two CTAs an SM");
};

// x's rows, each scaled by scale[i] (its i-th row's factor), into a plane.
template <int ROWS, int COLS>
M3_DEV void put_rows_scaled(const RowsInFlight<ROWS, COLS>& x, const float (&scale)[RowsInFlight<ROWS, COLS>::kCount],
                            m3_bf16* plane) {
  constexpr int kLd = PlaneShape<ROWS, COLS>::kLd;
  const int at = x.row(0) * kLd + x.col();
#pragma unroll
  for (int i = 0; i < x.kCount; ++i) {
    const float4 v = x.x[i];
    const float f = scale[i];
    put_split4<false>(make_float4(f * v.x, f * v.y, f * v.z, f * v.w), plane, nullptr,
                      at + i * RowsInFlight<ROWS, COLS>::kRowStep * kLd);
  }
}

// Three rounds of loads: the decays of the thread's rows, then S, v and dy, then qr and ks. With the
// decays' loads and exponentials among the 16 float4 of the second round, 172 bytes spilled.
M3_DEV void stage_core64(const CoreInputs& in, const CorePlanes& s) {
  using L = Core64Layout;
  using Rows64 = RowsInFlight<kCore64C, kCoreP>;
  // Each thread's rows' decays from its own loads; the first thread of a row keeps them for the
  // products (a branch of threads with loads of their own spilled more).
  const float last = in.cl[kCore64C - 1];
  float e[Rows64::kCount], w[Rows64::kCount];
  float* vec = s.f32(L::vec);
#pragma unroll
  for (int i = 0; i < Rows64::kCount; ++i) {
    const int r = Rows64::row(i);
    const float c = in.cl[r];
    e[i] = __expf(c);
    w[i] = __expf(last - c);
    if (Rows64::col() == 0) {
      vec[r] = c;
      vec[kCore64C + r] = e[i];
      vec[2 * kCore64C + r] = w[i];
    }
  }
  RowsInFlight<kCoreP, kCoreN> st;
  Rows64 v, dy;
  st.load(in.st);
  v.load(in.v);
  dy.load(in.dy);
  st.put<false>(s.at(L::state), nullptr);
  v.put<false>(s.at(L::v), nullptr);
  put_rows_scaled(v, w, s.at(L::wv));
  dy.put<false>(s.at(L::dy), nullptr);
  put_rows_scaled(dy, e, s.at(L::edy));
  RowsInFlight<kCore64C, kCoreN> qr, ks;
  qr.load(in.qr);
  ks.load(in.ks);
  qr.put<false>(s.at(L::qr), nullptr);
  ks.put<false>(s.at(L::ks), nullptr);
  __syncthreads();
}

// Mw and dMW as planes, and G's row and column sums: group g of four warps (warps 4 g to 4 g + 3)
// takes rows 32 g to 32 g + 31, each warp 16 of the 64 columns.
M3_DEV void core64_mixing(const CorePlanes& s, const CoreOutputs& out) {
  using L = Core64Layout;
  const int warp = core_tid() >> 5, group = warp >> 2, group_warp = warp & 3, r0 = 32 * group;
  PlaneTile<32, kCore64C, 1, 4> sc(group_warp), dm(group_warp);
  if (group == 1 || sc.n0 < 32) {  // warp-uniform: the first group's columns past 31 are all masked
    sc.template mac<kCoreN, false, false, kPlain>(s.at(L::qr) + r0 * L::Q::kLd, nullptr, L::Q::kLd, s.at(L::ks),
                                                  nullptr, L::Q::kLd);
    dm.template mac<kCoreP, false, false, kPlain>(s.at(L::dy) + r0 * L::T::kLd, nullptr, L::T::kLd, s.at(L::v),
                                                  nullptr, L::T::kLd);
  }
  const float* cl = s.f32(L::vec);
  constexpr int kLd = L::T::kLd, MT = decltype(sc)::MT, NTL = decltype(sc)::NTL;
  float row[MT][2] = {}, col[NTL][2] = {};
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NTL; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = r0 + sc.m0 + 16 * i + sc.g + 8 * h, c = sc.n0 + 8 * j + 2 * sc.t;
        float mw[2], dmw[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float wd = c + e <= r ? __expf(cl[r] - cl[c + e]) : 0.f;
          const float d = dm.acc[i][j][2 * h + e];
          mw[e] = wd * sc.acc[i][j][2 * h + e];
          dmw[e] = wd * d;
          const float gv = d * mw[e];
          row[i][h] += gv;
          col[j][e] += gv;
        }
        unsigned hi, lo;
        split_pair(mw[0], mw[1], hi, lo);
        *reinterpret_cast<unsigned*>(s.at(L::mw) + r * kLd + c) = hi;
        split_pair(dmw[0], dmw[1], hi, lo);
        *reinterpret_cast<unsigned*>(s.at(L::dmw) + r * kLd + c) = hi;
      }
  // Rows over the quad's lanes (t), columns over the eight row groups (g): fixed orders.
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row[i][h] += __shfl_xor_sync(0xffffffffu, row[i][h], 1);
      row[i][h] += __shfl_xor_sync(0xffffffffu, row[i][h], 2);
    }
#pragma unroll
  for (int j = 0; j < NTL; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e)
#pragma unroll
      for (int o = 4; o < 32; o <<= 1) col[j][e] += __shfl_xor_sync(0xffffffffu, col[j][e], o);
  float* row_part = s.f32(L::row_part);
  float* col_part = s.f32(L::col_part);
  if (sc.t == 0) {
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) row_part[group_warp * kCore64C + r0 + sc.m0 + 16 * i + sc.g + 8 * h] = row[i][h];
  }
  if (sc.g == 0) {
#pragma unroll
    for (int j = 0; j < NTL; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) col_part[group * kCore64C + sc.n0 + 8 * j + 2 * sc.t + e] = col[j][e];
  }
  __syncthreads();
  if (threadIdx.x < kCore64C) {
    const int i = threadIdx.x;
    out.row_g[i] = (row_part[i] + row_part[kCore64C + i]) + (row_part[2 * kCore64C + i] + row_part[3 * kCore64C + i]);
    out.col_g[i] = col_part[i] + col_part[kCore64C + i];
  }
}

// The five state-sized products, each written out before the next; dS staged over S between the
// two that read S or nothing of the states and the two that read dS (kRestage false: the probe's
// timing of the products alone, wrong values).
template <bool kRestage = true>
M3_DEV void core64_products(const CoreInputs& in, const CorePlanes& s, const CoreOutputs& out) {
  using L = Core64Layout;
  constexpr int QLd = L::Q::kLd, TLd = L::T::kLd;
  {
    PlaneTile<kCore64C, kCoreN> dqr;
    dqr.template mac<kCore64C, false, true, kPlain>(s.at(L::dmw), nullptr, TLd, s.at(L::ks), nullptr, QLd);
    dqr.template mac<kCoreP, false, true, kPlain>(s.at(L::edy), nullptr, TLd, s.at(L::state), nullptr, QLd);
    store_tiles(dqr, static_cast<const decltype(dqr)*>(nullptr), nullptr, out.dqr, kCoreN);
  }
  {
    PlaneTile<kCoreP, kCoreN> upd;
    upd.template mac<kCore64C, true, true, kPlain>(s.at(L::edy), nullptr, TLd, s.at(L::qr), nullptr, QLd);
    store_tiles(upd, static_cast<const decltype(upd)*>(nullptr), nullptr, out.upd, kCoreN);
  }
  RowsInFlight<kCoreP, kCoreN> ds;
  if constexpr (kRestage) ds.load(in.ds);  // travelling while the slowest warp finishes U
  __syncthreads();                         // every warp is done with S
  if constexpr (kRestage) ds.put<false>(s.at(L::state), nullptr);
  __syncthreads();
  {
    PlaneTile<kCore64C, kCoreN> dks;
    dks.template mac<kCore64C, true, true, kPlain>(s.at(L::dmw), nullptr, TLd, s.at(L::qr), nullptr, QLd);
    dks.template mac<kCoreP, false, true, kPlain>(s.at(L::wv), nullptr, TLd, s.at(L::state), nullptr, QLd);
    store_tiles(dks, static_cast<const decltype(dks)*>(nullptr), nullptr, out.dks, kCoreN);
  }
  {
    const float* w = s.f32(L::vec) + 2 * kCore64C;
    PlaneTile<kCore64C, kCoreP> intra, state;
    intra.template mac<kCore64C, true, true, kPlain>(s.at(L::mw), nullptr, TLd, s.at(L::dy), nullptr, TLd);
    state.template mac<kCoreN, false, false, kPlain>(s.at(L::ks), nullptr, QLd, s.at(L::state), nullptr, QLd);
    store_tiles(intra, &state, w, out.dv, kCoreP);
  }
}

}  // namespace m3pl
