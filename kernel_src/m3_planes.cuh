// Tile products on bf16 operand planes: the building block the backward's rewrite is measured with.
//
// Why: the backward's products run on tf32 (m16n8k8) with fp32 tiles in shared memory. Most of
// them contract over the tokens, the row index of every staged tile (the update dy^T qr, dks's
// dM^T qr, dv's M^T dy, the state parts' S and dS), and ldmatrix cannot transpose 32-bit words, so
// their fragments are loaded one element at a time (run 145: about 2.6 k of a job's 10 k shared
// wavefronts, and the instructions that address them). In 16 bits ldmatrix.trans hands out either
// orientation, and m16n8k16 does twice the multiply-adds of an m16n8k8 per instruction.
//
// Precision: an fp32 operand x is held as two bf16 planes, hi = bf16(x) and lo = bf16(x - hi)
// (16 significant bits, relative 2^-17), and a product is hi*hi + hi*lo + lo*hi (the dropped
// lo*lo is 2^-18 relative): methods/precision_study.py measured this "bf16x3" as about fp64 on
// every result (c00, c06 and a 4096-token sequence), where plain bf16 fails dangles (5.2e-3 to
// 2.5e-2) and plain tf32 grows with the sequence (3.55e-3 at 4096). An operand that is bf16 to
// begin with (v) needs no lo plane, and the same study (product by product, thirty-eighth session)
// finds only the scores' two backward products (dqr's and dks's intra parts) in need of all three
// terms: the others take one split operand (kSplitA, kSplitB) or none (kPlain).
//
// fp16 planes (M3_PLANES_FP16=1, thirty-ninth session): one plane of IEEE half, 11 significant bits
// as tf32 (rounded to nearest), and every product hi*hi alone: one m16n8k16 where tf32 takes two
// m16n8k8 and the bf16 mix up to three m16n8k16. methods/precision_study.py's "fp16" (half's
// exponent range included) matches tf32 on every result of the visible cases; the operands'
// magnitudes there stay under 40 (half overflows above 65504). The lo planes are then neither
// written nor read, whatever mode a product names.
//
// Layout: a plane of ROWS x COLS bf16, COLS contiguous, rows COLS + 8 elements apart. For COLS a
// multiple of 32 the row stride is 16 bytes more than a multiple of 64 or 128, so the 8 rows of an
// ldmatrix block fall on 8 distinct 16-byte bank groups: conflict-free in both orientations.
#pragma once

#include "m3_common.cuh"

#ifndef M3_PLANES_FP16
#define M3_PLANES_FP16 0
#endif

namespace m3pl {

constexpr bool kPlanesFp16 = M3_PLANES_FP16 != 0;

template <int ROWS, int COLS>
struct PlaneShape {
  static_assert(COLS % 32 == 0 && ROWS % 16 == 0, "planes are whole 16 x 32 blocks");
  static constexpr int kLd = COLS + 8;  // elements
  static constexpr int kElems = ROWS * kLd;
};

// x0 and x1 (adjacent columns) into hi and lo words: one cvt.rn.bf16x2 each, the remainders exact
// in fp32 (x - bf16(x) has at most 16 significant bits). fp16 planes: hi only (lo is left unset).
M3_DEV void split_pair(float x0, float x1, unsigned& hi, unsigned& lo) {
  if constexpr (kPlanesFp16) {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(hi) : "f"(x1), "f"(x0));
    lo = 0u;
  } else {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(hi) : "f"(x1), "f"(x0));
    const float h0 = __uint_as_float(hi << 16), h1 = __uint_as_float(hi & 0xffff0000u);
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(lo) : "f"(x1 - h1), "f"(x0 - h0));
  }
}

M3_DEV unsigned plane_address(const m3_bf16* plane, int ld, int row, int col) {
  return static_cast<unsigned>(__cvta_generic_to_shared(plane + row * ld + col));
}

M3_DEV void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// m16n8k16 in the planes' format (the f16 and bf16 fragments have one layout).
M3_DEV void mma_bf16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  if constexpr (kPlanesFp16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// The A fragment of the 16 x 16 block at (m, k) of A (M x K), stored [m][k] (kTrans false) or
// [k][m] (true). Matrices in a0..a3 order: (m, k), (m + 8, k), (m, k + 8), (m + 8, k + 8).
template <bool kTrans>
M3_DEV void load_a(unsigned (&a)[4], const m3_bf16* plane, int ld, int m, int k, int lane) {
  if constexpr (kTrans) {
    ldmatrix_x4_trans(a, plane_address(plane, ld, k + (lane & 7) + ((lane >> 4) << 3), m + (lane & 8)));
  } else {
    ldmatrix_x4(a, plane_address(plane, ld, m + (lane & 7) + (lane & 8), k + ((lane >> 4) << 3)));
  }
}

// The B fragments of two 8-column blocks (n and n + 8) over k..k+15 of B (K x N), stored [n][k]
// (kTrans false) or [k][n] (true): b[0..1] for columns n, b[2..3] for n + 8.
template <bool kTrans>
M3_DEV void load_b_pair(unsigned (&b)[4], const m3_bf16* plane, int ld, int n, int k, int lane) {
  if constexpr (kTrans) {
    ldmatrix_x4_trans(b, plane_address(plane, ld, k + (lane & 7) + (lane & 8), n + ((lane >> 4) << 3)));
  } else {
    ldmatrix_x4(b, plane_address(plane, ld, n + (lane & 7) + ((lane >> 4) << 3), k + (lane & 8)));
  }
}

// Which operands come in two planes (bit flags): kPlain hi*hi; kSplitA hi*hi + lo*hi (B exact in
// bf16, or its rounding within budget); kSplitB hi*hi + hi*lo; kSplitBoth all three.
enum SplitMode : int { kPlain = 0, kSplitA = 1, kSplitB = 2, kSplitBoth = 3 };

// A tile D (M x N, fp32) over a group of kWarpsM x kWarpsN warps: warp w of the group owns rows
// (w / kWarpsN) M / kWarpsM ..., columns (w % kWarpsN) N / kWarpsN ...; acc[i][j] is the 16 x 8
// piece at row m0 + 16 i, column n0 + 8 j, its thread (g, t) holding rows + g and + g + 8, columns
// + 2 t and + 2 t + 1 (MmaTile's layout for the default 2 x 4). mac adds products of any depth,
// orientation and split into the same accumulators.
template <int M, int N, int kWarpsM = 2, int kWarpsN = 4>
struct PlaneTile {
  static constexpr int WM = M / kWarpsM, WN = N / kWarpsN, MT = WM / 16, NTL = WN / 8;
  static_assert(MT * 16 == WM && NTL * 8 == WN && NTL % 2 == 0, "tile not divisible into pairs of 16 x 8 pieces");
  float acc[MT][NTL][4];
  int m0, n0, g, t, lane;

  // warp: this warp's index within its group.
  M3_DEV explicit PlaneTile(int warp = static_cast<int>(threadIdx.x >> 5)) {
    lane = threadIdx.x & 31;
    m0 = (warp / kWarpsN) * WM;
    n0 = (warp % kWarpsN) * WN;
    g = lane >> 2;
    t = lane & 3;
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int j = 0; j < NTL; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
  }

  // D += A (M x K) B (K x N); a_hi/a_lo: A's planes with leading dimension lda, b_hi/b_lo likewise
  // (a lo plane is read only under kSplitA, b's only under kSplitB).
  template <int K, bool kATrans, bool kBTrans, int kMode>
  M3_DEV void mac(const m3_bf16* a_hi, const m3_bf16* a_lo, int lda, const m3_bf16* b_hi, const m3_bf16* b_lo,
                  int ldb) {
    static_assert(K % 16 == 0, "K must be a multiple of 16");
    constexpr bool kLoA = !kPlanesFp16 && (kMode & kSplitA) != 0, kLoB = !kPlanesFp16 && (kMode & kSplitB) != 0;
#pragma unroll
    for (int k = 0; k < K; k += 16) {
      unsigned ah[MT][4], al[MT][4], bh[NTL / 2][4], bl[NTL / 2][4];
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        load_a<kATrans>(ah[i], a_hi, lda, m0 + 16 * i, k, lane);
        if constexpr (kLoA) load_a<kATrans>(al[i], a_lo, lda, m0 + 16 * i, k, lane);
      }
#pragma unroll
      for (int j = 0; j < NTL / 2; ++j) {
        load_b_pair<kBTrans>(bh[j], b_hi, ldb, n0 + 16 * j, k, lane);
        if constexpr (kLoB) load_b_pair<kBTrans>(bl[j], b_lo, ldb, n0 + 16 * j, k, lane);
      }
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NTL; ++j) {
          const int jp = j >> 1, o = (j & 1) << 1;
          // The small terms first, into the running sum, then the leading one.
          if constexpr (kLoA) mma_bf16(acc[i][j], al[i], bh[jp][o], bh[jp][o + 1]);
          if constexpr (kLoB) mma_bf16(acc[i][j], ah[i], bl[jp][o], bl[jp][o + 1]);
          mma_bf16(acc[i][j], ah[i], bh[jp][o], bh[jp][o + 1]);
        }
    }
  }

  // f(i, j, h, row, col) for the column pairs a thread holds: acc[i][j][2 h] and acc[i][j][2 h + 1]
  // are the tile's (row, col) and (row, col + 1); also for zipping tiles of one layout.
  template <class F>
  M3_DEV void for_each_slot(F f) const {
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int j = 0; j < NTL; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) f(i, j, h, m0 + 16 * i + g + 8 * h, n0 + 8 * j + 2 * t);
  }

  // f(row, col, acc at col, acc at col + 1) for the column pairs a thread holds.
  template <class F>
  M3_DEV void for_each_pair(F f) const {
    for_each_slot([&](int i, int j, int h, int r, int c) { f(r, c, acc[i][j][2 * h], acc[i][j][2 * h + 1]); });
  }
};

}  // namespace m3pl
