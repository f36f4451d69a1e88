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

#ifndef M3_CORE64_SCALED
#define M3_CORE64_SCALED 0
#endif

namespace m3pl {

constexpr int kCore64C = 64;

// Half's range guard (M3_CORE64_SCALED=1; the design note's "range guard for half planes"): every
// tile staged or formed in half carries a power-of-two scale of its own, chosen from its largest
// element, and each product's result is divided by its operands' scales at the store. Products
// whose scales differ are then kept in separate accumulators: dqr and dks run as two column halves
// of two tiles each, and w v is not staged (w is dks's row scale at the store, as for dv).
constexpr bool kCore64Scaled = M3_CORE64_SCALED != 0;
enum Core64Tile : int { kTileQr, kTileKs, kTileV, kTileDy, kTileS, kTileDs, kTileMw, kTileDmw, kCore64Tiles };

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
  static constexpr int red = col_part + 2 * kCore64C * 4;     // fp32 [tile][warp]: the warps' maxima
  static constexpr int scales = red + kCore64Tiles * 8 * 4;  // fp32 [tile]
  static constexpr int total = scales + kCore64Tiles * 4;
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

// The largest |element| of a thread's share of a tile.
template <int ROWS, int COLS>
M3_DEV float rows_amax(const RowsInFlight<ROWS, COLS>& x) {
  float m = 0.f;
#pragma unroll
  for (int i = 0; i < x.kCount; ++i)
    m = fmaxf(m, fmaxf(fmaxf(fabsf(x.x[i].x), fabsf(x.x[i].y)), fmaxf(fabsf(x.x[i].z), fabsf(x.x[i].w))));
  return m;
}

// A warp's maximum of m into red[tile][warp]; the block's comes after the next barrier.
M3_DEV void publish_amax(float m, const CorePlanes& s, int tile) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if ((core_tid() & 31) == 0) s.f32(Core64Layout::red)[tile * 8 + (core_tid() >> 5)] = m;
}

// After the barrier that follows publish_amax: the tile's scale, a power of two that puts its
// largest element in [2^14, 2^15) (half overflows past 65504); 1 for a tile of zeros or one whose
// maximum is not finite (NaN elements are skipped by fmaxf; an inf stays inf). Thread 0 keeps it
// for the stores.
M3_DEV float tile_scale(const CorePlanes& s, int tile) {
  const float* red = s.f32(Core64Layout::red) + tile * 8;
  float m = 0.f;
#pragma unroll
  for (int w = 0; w < 8; ++w) m = fmaxf(m, red[w]);
  float scale, inverse;
  half_block_scale(m, scale, inverse);
  (void)inverse;
  if (core_tid() == 0) s.f32(Core64Layout::scales)[tile] = scale;
  return scale;
}

// x's elements times one factor into a plane.
template <int ROWS, int COLS>
M3_DEV void put_rows_times(const RowsInFlight<ROWS, COLS>& x, float f, m3_bf16* plane) {
  float each[RowsInFlight<ROWS, COLS>::kCount];
#pragma unroll
  for (int i = 0; i < x.kCount; ++i) each[i] = f;
  put_rows_scaled(x, each, plane);
}

// Three rounds of loads: the decays of the thread's rows, then S, v and dy, then qr and ks. With the
// decays' loads and exponentials among the 16 float4 of the second round, 172 bytes spilled. Under
// the range guard each of the last two rounds waits at a barrier for its tiles' maxima before it
// writes its planes.
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
  RowsInFlight<kCore64C, kCoreN> qr, ks;
  if constexpr (kCore64Scaled) {
    // Each round's maxima meet across a barrier before its planes are written.
    publish_amax(rows_amax(st), s, kTileS);
    publish_amax(rows_amax(v), s, kTileV);
    publish_amax(rows_amax(dy), s, kTileDy);
    __syncthreads();
    const float s_st = tile_scale(s, kTileS), s_v = tile_scale(s, kTileV), s_dy = tile_scale(s, kTileDy);
    put_rows_times(st, s_st, s.at(L::state));
    put_rows_times(v, s_v, s.at(L::v));
    put_rows_times(dy, s_dy, s.at(L::dy));
#pragma unroll
    for (int i = 0; i < Rows64::kCount; ++i) e[i] *= s_dy;
    put_rows_scaled(dy, e, s.at(L::edy));
    qr.load(in.qr);
    ks.load(in.ks);
    publish_amax(rows_amax(qr), s, kTileQr);
    publish_amax(rows_amax(ks), s, kTileKs);
    __syncthreads();
    put_rows_times(qr, tile_scale(s, kTileQr), s.at(L::qr));
    put_rows_times(ks, tile_scale(s, kTileKs), s.at(L::ks));
    if (core_tid() == 0) s.f32(L::scales)[kTileDs] = 1.f;  // until dS is staged over S
  } else {
    st.put<false>(s.at(L::state), nullptr);
    v.put<false>(s.at(L::v), nullptr);
    put_rows_scaled(v, w, s.at(L::wv));
    dy.put<false>(s.at(L::dy), nullptr);
    put_rows_scaled(dy, e, s.at(L::edy));
    qr.load(in.qr);
    ks.load(in.ks);
    qr.put<false>(s.at(L::qr), nullptr);
    ks.put<false>(s.at(L::ks), nullptr);
  }
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
  // Two adjacent values of Mw and of dMW, each times its plane's scale, into their planes.
  const auto put_mixing_pairs = [&](int r, int c, float mw0, float mw1, float dmw0, float dmw1) {
    unsigned hi, lo;
    split_pair(mw0, mw1, hi, lo);
    *reinterpret_cast<unsigned*>(s.at(L::mw) + r * kLd + c) = hi;
    split_pair(dmw0, dmw1, hi, lo);
    *reinterpret_cast<unsigned*>(s.at(L::dmw) + r * kLd + c) = hi;
  };
  // Scaled: the accumulators back to true values; Mw and dMW kept in them until their own scales
  // are known.
  float k_sc = 1.f, k_dm = 1.f, amax_mw = 0.f, amax_dmw = 0.f;
  if constexpr (kCore64Scaled) {
    const float* scales = s.f32(L::scales);
    k_sc = 1.f / (scales[kTileQr] * scales[kTileKs]);
    k_dm = 1.f / (scales[kTileDy] * scales[kTileV]);
  }
  sc.for_each_slot([&](int i, int j, int h, int rt, int c) {
    const int r = r0 + rt;
    float mw[2], dmw[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float wd = c + e <= r ? __expf(cl[r] - cl[c + e]) : 0.f;
      const float d = k_dm * dm.acc[i][j][2 * h + e];
      mw[e] = wd * (k_sc * sc.acc[i][j][2 * h + e]);
      dmw[e] = wd * d;
      const float gv = d * mw[e];
      row[i][h] += gv;
      col[j][e] += gv;
    }
    if constexpr (kCore64Scaled) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        sc.acc[i][j][2 * h + e] = mw[e];
        dm.acc[i][j][2 * h + e] = dmw[e];
        amax_mw = fmaxf(amax_mw, fabsf(mw[e]));
        amax_dmw = fmaxf(amax_dmw, fabsf(dmw[e]));
      }
    } else {
      put_mixing_pairs(r, c, mw[0], mw[1], dmw[0], dmw[1]);
    }
  });
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
  if constexpr (kCore64Scaled) {
    publish_amax(amax_mw, s, kTileMw);
    publish_amax(amax_dmw, s, kTileDmw);
  }
  __syncthreads();
  if (threadIdx.x < kCore64C) {
    const int i = threadIdx.x;
    out.row_g[i] = (row_part[i] + row_part[kCore64C + i]) + (row_part[2 * kCore64C + i] + row_part[3 * kCore64C + i]);
    out.col_g[i] = col_part[i] + col_part[kCore64C + i];
  }
  if constexpr (kCore64Scaled) {
    const float s_mw = tile_scale(s, kTileMw), s_dmw = tile_scale(s, kTileDmw);
    sc.for_each_slot([&](int i, int j, int h, int r, int c) {  // dm holds the same slots
      put_mixing_pairs(r0 + r, c, s_mw * sc.acc[i][j][2 * h], s_mw * sc.acc[i][j][2 * h + 1],
                       s_dmw * dm.acc[i][j][2 * h], s_dmw * dm.acc[i][j][2 * h + 1]);
    });
    __syncthreads();  // the planes, before the products read them
  }
}

// out (64 x 128) = k1 (A1 B1) + row_scale k2 (A2 S), for dqr (dMW ks + (e dy) S) and dks
// (dMW^T qr + (w v) dS): A1 a 64 x 64 plane (transposed under kA1Trans), B1 a 64 x 128 plane read
// [k][n], A2 a 64 x 64 plane, S the state plane. Unscaled, both products share one tile (k1, k2 1,
// row_scale null: w is already in w v); scaled, their scales differ, so each gets its own tile, a
// column half at a time (32 accumulators a thread, not 64).
template <bool kA1Trans>
M3_DEV void core64_two_products(const CorePlanes& s, int a1, int b1, int a2, const float* row_scale, float* out,
                                float k1, float k2) {
  using L = Core64Layout;
  constexpr int QLd = L::Q::kLd, TLd = L::T::kLd, kHalf = kCoreN / 2;
  if constexpr (kCore64Scaled) {
#pragma unroll 1
    for (int h = 0; h < 2; ++h) {
      PlaneTile<kCore64C, kHalf> first, second;
      first.template mac<kCore64C, kA1Trans, true, kPlain>(s.at(a1), nullptr, TLd, s.at(b1) + h * kHalf, nullptr,
                                                          QLd);
      second.template mac<kCoreP, false, true, kPlain>(s.at(a2), nullptr, TLd, s.at(L::state) + h * kHalf, nullptr,
                                                       QLd);
      store_tiles(first, &second, row_scale, out + h * kHalf, kCoreN, k1, k2);
    }
  } else {
    PlaneTile<kCore64C, kCoreN> both;
    both.template mac<kCore64C, kA1Trans, true, kPlain>(s.at(a1), nullptr, TLd, s.at(b1), nullptr, QLd);
    both.template mac<kCoreP, false, true, kPlain>(s.at(a2), nullptr, TLd, s.at(L::state), nullptr, QLd);
    store_tiles(both, static_cast<const decltype(both)*>(nullptr), nullptr, out, kCoreN);
  }
}

// The five state-sized products, each written out before the next; dS staged over S between the
// two that read S or nothing of the states and the two that read dS (kRestage false: the probe's
// timing of the products alone, wrong values).
template <bool kRestage = true>
M3_DEV void core64_products(const CoreInputs& in, const CorePlanes& s, const CoreOutputs& out) {
  using L = Core64Layout;
  constexpr int QLd = L::Q::kLd, TLd = L::T::kLd;
  const float* w = s.f32(L::vec) + 2 * kCore64C;
  const float* sc = s.f32(L::scales);  // each written before a barrier this phase follows
  // 1 / (the scales of a product's two operands); 1 unscaled.
  const auto undo = [&](int a, int b) { return kCore64Scaled ? 1.f / (sc[a] * sc[b]) : 1.f; };
  core64_two_products<false>(s, L::dmw, L::ks, L::edy, nullptr, out.dqr, undo(kTileDmw, kTileKs),
                             undo(kTileDy, kTileS));
  {
    PlaneTile<kCoreP, kCoreN> upd;
    upd.template mac<kCore64C, true, true, kPlain>(s.at(L::edy), nullptr, TLd, s.at(L::qr), nullptr, QLd);
    store_tiles(upd, static_cast<const decltype(upd)*>(nullptr), nullptr, out.upd, kCoreN, undo(kTileDy, kTileQr));
  }
  RowsInFlight<kCoreP, kCoreN> ds;
  if constexpr (kRestage) {
    ds.load(in.ds);  // travelling while the slowest warp finishes U
    if constexpr (kCore64Scaled) publish_amax(rows_amax(ds), s, kTileDs);
  }
  __syncthreads();  // every warp is done with S
  if constexpr (kRestage) {
    if constexpr (kCore64Scaled) {
      put_rows_times(ds, tile_scale(s, kTileDs), s.at(L::state));
    } else {
      ds.put<false>(s.at(L::state), nullptr);
    }
  }
  __syncthreads();
  // Scaled, w is the state part's row scale at the store; unscaled, it is in the plane w v.
  core64_two_products<true>(s, L::dmw, L::qr, kCore64Scaled ? L::v : L::wv, kCore64Scaled ? w : nullptr, out.dks,
                            undo(kTileDmw, kTileQr), undo(kTileV, kTileDs));
  {
    PlaneTile<kCore64C, kCoreP> intra, state;
    intra.template mac<kCore64C, true, true, kPlain>(s.at(L::mw), nullptr, TLd, s.at(L::dy), nullptr, TLd);
    state.template mac<kCoreN, false, false, kPlain>(s.at(L::ks), nullptr, QLd, s.at(L::state), nullptr, QLd);
    store_tiles(intra, &state, w, out.dv, kCoreP, undo(kTileMw, kTileDy), undo(kTileKs, kTileDs));
  }
}

}  // namespace m3pl
