// The k/v side of a chunk-64 backward on warpgroup tile products (M3_CP_BACKWARD64KV, v123): one
// CTA of two warpgroups per (64 tokens, head) job, the sequence's jobs in reverse, computing each
// token's per-head dk (ws_dkh), each chunk's dk_bias partial and dv, with the state-gradient chain.
// Included after m3_backward64q.cuh, whose staging it shares.
//
// Why: the design note's k/v side (its blueprint, "The q side of the backward, built"), the
// second half of the backward on wgmma, written as v121's q side was: a test bed beside v103's
// backward, which then leaves ws_dkh, the dk half of its bias partials and dv alone, so that dk,
// dk_bias and dv check the kernel end to end while every other result stays v121's. Shared memory
// is not yet fitted for two CTAs per SM (one CTA per SM, 208 KB): the scheme first, the fit later.
//
// A job (warpgroup wg = 0, 1, its warps wq, lane = 4 g + i), the halves h of its two chunks of 32:
//   1. m3_forward64's staging (angles, QR, KS), dy and v (m3_backward64q's), and e dy^T [p][t]
//      with its rows p stored permuted (position 8 b + 2 i holds p = 8 b + i, + 1 holds 8 b + i + 4);
//   2. the transposed scores S^T = KS QR^T and dM^T = v dy^T (warpgroup wg the tokens t of half wg,
//      all 64 key rows), M^T and (dM W)^T of each half into [32][32] tiles;
//   3. V_h^T [n][p] = QR_h^T (e dy_h) for both halves (rows n in the q side's pair order, QR^T's
//      register operand read from the QR tile), before the wait; then the chain: the gradient of the
//      state leaving the job (the successor's hand-off, or dfinal_ssm), G_0 = alpha_1 G_1 + V_1,
//      alpha_0 G_0 + V_0 handed to the predecessor (in the accumulator's layout, 512 contiguous
//      bytes a warp instruction) and its flag; thanks to the permuted rows of e dy^T each G_h^T
//      holds the register operand's (i, i + 4) pairs: G_h^T is the next products' A as it stands;
//   4. per half: dks^T = G_h^T (v_h)^T, scaled by w_s, + QR_h^T (dM W)_h^T; the epilogue (sc, the
//      final k's gradient, the inverse rotation, the gamma term) writes dkh and the bias partial;
//   5. dv^T of half wg by warpgroup wg: G_h [p][n] (a tile written from the registers) times KS_h,
//      scaled by w_s, + dy_h^T M_h (dy^T's register operand by scalar loads from the dy tile);
//      the skip term and the final v's gradient; dv out.
#pragma once

#include "m3_wgmma.cuh"

#if !M3_CP_BACKWARD64Q
#error "M3_CP_BACKWARD64KV shares m3_backward64q.cuh's staging: build it with M3_CP_BACKWARD64Q"
#endif

namespace m3b64kv {
using namespace m3b64q;

enum : int {
  kQr = 0,
  kKs = 32768,
  kDy = 65536,            // fp32 [64 t][64 p]
  kVt = 81920,            // fp32 [64 s][64 p]
  kDyTe = 98304,          // fp32 [64 p, permuted][64 t]: e_t dy[t][p]
  kMt = 114688,           // M^T of half h at + 4096 h: fp32 [32 s][32 t]
  kDmwT = 122880,         // (dM W)^T of half h at + 4096 h
  kG = 131072,            // G_h [64 p][128 n] at + 32768 h
  kPhi = 196608,          // the angle tile
  kVec = kPhi + kJob * kPhiStride * 4,
  kVecCount = 7,          // m3_forward64's six, then dy . v
  kScalars = kVec + kVecCount * kJob * 4,
  kSmemBytes = kScalars + 16 * 4,
  kDynamicSmem = kSmemBytes + 1024,
};
static_assert(kG + 2 * 32768 <= kPhi && kDmwT + 8192 <= kG && kMt + 8192 <= kDmwT, "regions overlap");
static_assert(kDynamicSmem == kM3Backward64kvSmemBytes, "the host launches with kM3Backward64kvSmemBytes");

// The k/v side's tiles, over any of the layouts' common ones (the whole backward's too).
template <class Common>
struct KvTiles : Common {
  M3_DEV float* dyte() const { return this->at(kDyTe); }
  M3_DEV float* mt(int h) const { return this->at(kMt + 4096 * h); }
  M3_DEV float* dmwt(int h) const { return this->at(kDmwT + 4096 * h); }
  M3_DEV float* g(int h) const { return this->at(kG + 32768 * h); }
};
using SmemKV = KvTiles<BackwardTiles<kPhi, kVec, kScalars>>;

// e dy^T's row position of value column p (see the top): the forward's KS^T order.
M3_DEV int permuted_p(int p) { return permuted_column(p); }
// The value column at accumulator position 8 jb + 2 i + e of V^T, G^T: p = 8 jb + i + 4 e.
M3_DEV int p_at(int jb, int i, int e) { return 8 * jb + i + 4 * e; }

// e_t dy[t][p] into the transposed tile, a warp instruction per block of 4 value columns by 8
// tokens: with the swizzle and the permuted rows both its reads and its writes meet 32 distinct
// banks (bank model; a column of 32 tokens a warp was four-way on the reads).
template <class Tiles>
M3_DEV void stage_dyte(const Tiles& s) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const float* ev = s.vec(kE);
#pragma unroll 4
  for (int it = 0; it < P * kJob / NT; ++it) {
    const int b = it * NW + warp;  // (4 value columns, 8 tokens)
    const int p = 4 * (b >> 3) + (lane >> 3), t = 8 * (b & 7) + (lane & 7);
    s.dyte()[m3wg::sw128_index(P, permuted_p(p), t)] = ev[t] * s.dy()[m3wg::sw128_index(kJob, t, p)];
  }
}

// A 64 x 8 register operand of rows n (the q side's pair order: n0 = 64 wg + 16 wq + 2 g and n0 + 1)
// from a token-major tile [t][n] (QR): k-step tokens t0 + 8 k + i and + 4.
M3_DEV void transposed_fragments(const float* tile, int t0, int n0, int i, float (&a)[4][4]) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int t = t0 + 8 * k + i;
    const float2 lo = *reinterpret_cast<const float2*>(tile + m3wg::sw128_index(kJob, t, n0));
    const float2 hi = *reinterpret_cast<const float2*>(tile + m3wg::sw128_index(kJob, t + 4, n0));
    a[k][0] = lo.x, a[k][1] = lo.y, a[k][2] = hi.x, a[k][3] = hi.y;
  }
}

// G_h's tile [p][n] from G_h^T in registers (rows n0, n0 + 1; columns p_at(jb, i, e)).
template <class Tiles>
M3_DEV void store_g_tile(const Tiles& s, int h, const float (&g)[32], int n0, int i) {
#pragma unroll
  for (int jb = 0; jb < 8; ++jb) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      *reinterpret_cast<float2*>(s.g(h) + m3wg::sw128_index(P, p_at(jb, i, e), n0)) =
          make_float2(g[4 * jb + e], g[4 * jb + 2 + e]);
    }
  }
}

// dks^T of half h (this warpgroup's rows n0, n0 + 1), then dkh and the dk_bias partial. With
// kTerms also the pair's angle gradient kr x dkr, added to terms.dphi (after the q side's), and
// dsc[t] = dks[t] . kr[t] as per-warp partial sums in terms.part (kr rebuilt from k + k_bias).
template <bool kTerms, class Tiles>
M3_DEV void dk_half(const M3Params& p, const Job64& job, const Tiles& s, const float (&g)[32], int h, int a,
                    int len, int n0, int i, bool last_job, TermOut terms = {}) {
  const int H = p.H;
  float acc[16];
  m3wg::zero_accumulator(acc);
  // The state part: G_h^T (v_h)^T, K = p in order; G^T's words (i, i + 4) sit at 4 k + 0, 1.
  m3wg::wgmma_fence();
#pragma unroll
  for (int k = 0; k < P / 8; ++k) {
    m3wg::wgmma_m64n32k8_tf32_rs(acc, g[4 * k], g[4 * k + 2], g[4 * k + 1], g[4 * k + 3],
                                 m3wg::sw128_kstep(smem_addr(s, s.vt()) + 4096 * h, kJob, k));
  }
  m3wg::wgmma_commit();
  m3wg::wgmma_wait<0>();
  scale_token_columns(acc, s.vec(kWb) + 32 * h, i);
  {
    float a4[4][4];
    transposed_fragments(s.qr(), 32 * h, n0, i, a4);
    m3wg::wgmma_fence();
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      m3wg::wgmma_m64n32k8_tf32_rs(acc, a4[k][0], a4[k][1], a4[k][2], a4[k][3],
                                   m3wg::sw128_kstep(smem_addr(s, s.dmwt(h)), 32, k));
    }
    m3wg::wgmma_commit();
    m3wg::wgmma_wait<0>();
  }
  // The epilogue: dkr = sc dks (+ the final k's gradient at the sequence's last token), turned back,
  // plus (dqk gamma) (q + q_bias).
  const int pair = n0 >> 1;
  const float2 qb = *reinterpret_cast<const float2*>(p.q_bias + job.h * N + n0);
  float b0 = 0.f, b1 = 0.f;
#pragma unroll
  for (int jb = 0; jb < 4; ++jb) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int t = 32 * h + 8 * jb + 2 * i + e;
      float dsc = 0.f;  // kTerms: this pair's share of dks . kr
      if (t < len) {
      const float sc = s.vec(kSc)[t];
      float d0 = sc * acc[4 * jb + e], d1 = sc * acc[4 * jb + 2 + e];
      if (last_job && t == len - 1 && p.dfinal_k) {
        const float2 fk = *reinterpret_cast<const float2*>(p.dfinal_k + (static_cast<long long>(job.seq) * H + job.h) * N + n0);
        d0 += fk.x;
        d1 += fk.y;
      }
      const long long tg = static_cast<long long>(job.start) + a + t;
      float u0 = d0, u1 = d1, kr0 = 0.f, kr1 = 0.f;
      if constexpr (kTerms) {
        const unsigned kraw = *reinterpret_cast<const unsigned*>(p.k + tg * N + n0);
        const float2 kb = *reinterpret_cast<const float2*>(p.k_bias + job.h * N + n0);
        kr0 = bf2f(static_cast<m3_bf16>(kraw & 0xffffu)) + kb.x;
        kr1 = bf2f(static_cast<m3_bf16>(kraw >> 16)) + kb.y;
      }
      if (pair < A) {
        float sn, cs;
        m3_sincos(s.phi()[t * kPhiStride + pair], &sn, &cs);
        u0 = d0 * cs + d1 * sn;
        u1 = -d0 * sn + d1 * cs;
        if constexpr (kTerms) {
          // kr as the staging rotated it; the angle gradient of the pair, after the q side's.
          const float k0 = kr0, k1 = kr1;
          kr0 = k0 * cs - k1 * sn;
          kr1 = k0 * sn + k1 * cs;
          terms.dphi[(t - 32 * h) * LDA + pair] += kr0 * d1 - kr1 * d0;
        }
      }
      if constexpr (kTerms) dsc = acc[4 * jb + e] * kr0 + acc[4 * jb + 2 + e] * kr1;
      const unsigned qraw = *reinterpret_cast<const unsigned*>(p.q + tg * N + n0);
      const float q0 = bf2f(static_cast<m3_bf16>(qraw & 0xffffu)) + qb.x;
      const float q1 = bf2f(static_cast<m3_bf16>(qraw >> 16)) + qb.y;
      const float gt = -s.vec(kDyv)[t] * s.vec(kGam)[t];
      const float k0 = fmaf(gt, q0, u0), k1 = fmaf(gt, q1, u1);
      *reinterpret_cast<float2*>(p.ws_dkh + (tg * H + job.h) * N + n0) = make_float2(k0, k1);
      b0 += k0;
      b1 += k1;
      }
      if constexpr (kTerms) store_warp_partial(dsc, terms.part, threadIdx.x >> 5, t - 32 * h);
    }
  }
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    b0 += __shfl_xor_sync(0xffffffffu, b0, off);
    b1 += __shfl_xor_sync(0xffffffffu, b1, off);
  }
  if (i == 0) {
    const long long row = (static_cast<long long>(job.chunk_base) + 2 * job.round + h) * H + job.h;
    float* part = p.ws_partial + row * (2 * N + 1) + N + n0;  // the k half of the chunk's row
    part[0] = b0;
    part[1] = b1;
  }
}

// dv of half wg (this warpgroup alone): dv^T [p][s] = G_wg [p][n] KS_wg^T, scaled by w_s, +
// dy_wg^T M_wg; then the skip term and the final v's gradient, dv out. With kTerms also x[s] =
// v[s] . (the state part of dv[s]) as per-warp partial sums in terms.part (the warpgroup's four).
template <bool kTerms, class Tiles>
M3_DEV void dv_half(const M3Params& p, const Job64& job, const Tiles& s, int wg, int wq, int g, int i, int a,
                    int len, bool last_job, TermOut terms = {}) {
  const int H = p.H, h = wg;
  float acc[16];
  m3wg::zero_accumulator(acc);
  m3wg::wgmma_fence();
#pragma unroll
  for (int k = 0; k < N / 8; ++k) {
    m3wg::wgmma_m64n32k8_tf32(acc, m3wg::sw128_kstep(smem_addr(s, s.g(h)), P, k),
                              m3wg::sw128_kstep(smem_addr(s, s.ks()) + 4096 * h, kJob, k));
  }
  m3wg::wgmma_commit();
  m3wg::wgmma_wait<0>();
  scale_token_columns(acc, s.vec(kWb) + 32 * h, i);
  if constexpr (kTerms) {
    // x's partials: this thread's rows p0, p0 + 8, then the warp's (lanes 4 g + i, g summed).
#pragma unroll
    for (int jb = 0; jb < 4; ++jb) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int t = 32 * h + 8 * jb + 2 * i + e, p0 = 16 * wq + g;
        store_warp_partial(s.vt()[m3wg::sw128_index(kJob, t, p0)] * acc[4 * jb + e] +
                               s.vt()[m3wg::sw128_index(kJob, t, p0 + 8)] * acc[4 * jb + 2 + e],
                           terms.part, wq, t - 32 * h);
      }
    }
  }
  {
    // dy^T's register operand: rows p0 = 16 wq + g and + 8, tokens 32 h + 8 k + i and + 4.
    const int p0 = 16 * wq + g;
    float f[4][4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int t = 32 * h + 8 * k + i;
      f[k][0] = s.dy()[m3wg::sw128_index(kJob, t, p0)];
      f[k][1] = s.dy()[m3wg::sw128_index(kJob, t, p0 + 8)];
      f[k][2] = s.dy()[m3wg::sw128_index(kJob, t + 4, p0)];
      f[k][3] = s.dy()[m3wg::sw128_index(kJob, t + 4, p0 + 8)];
    }
    m3wg::wgmma_fence();
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      m3wg::wgmma_m64n32k8_tf32_rs(acc, f[k][0], f[k][1], f[k][2], f[k][3],
                                   m3wg::sw128_kstep(smem_addr(s, s.mt(h)), 32, k));
    }
    m3wg::wgmma_commit();
    m3wg::wgmma_wait<0>();
  }
  const float* skip = s.vec(kSkip);
#pragma unroll
  for (int jb = 0; jb < 4; ++jb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int pr = 16 * wq + g + 8 * (e >> 1), t = 32 * h + 8 * jb + 2 * i + (e & 1);
      if (t >= len) continue;
      float dv = acc[4 * jb + e] + skip[t] * s.dy()[m3wg::sw128_index(kJob, t, pr)];
      if (last_job && t == len - 1 && p.dfinal_v) dv += bf2f(p.dfinal_v[(static_cast<long long>(job.seq) * H + job.h) * P + pr]);
      p.dv[((static_cast<long long>(job.start) + a + t) * H + job.h) * P + pr] = f2bf(dv);
    }
  }
}

// Where a job's dc terms from the transposed scores go (the full backward, kTerms): G = dM * M's
// column sums colg[s] (one quad per key) and its row sums as two per-warp partials rowpart[2][64].
struct ScoreTerms {
  float* colg;
  float* rowpart;
  float* dmw;  // (dM W) [t][s] of half h at dmw + 1024 h: the q side's operand
};

// 2. S^T and dM^T for the tokens of half wg, all 64 keys; M^T and (dM W)^T of half wg into their
// tiles. With kTerms also G's sums and dM W untransposed (ScoreTerms).
template <bool kTerms, class Tiles>
M3_DEV void transposed_scores(const Tiles& s, int len, int wg, int wq, int g, int i, ScoreTerms terms = {}) {
  float st[16], dm[16];
  m3wg::zero_accumulator(st);
  m3wg::zero_accumulator(dm);
  m3wg::wgmma_fence();
#pragma unroll
  for (int k = 0; k < N / 8; ++k) {
    m3wg::wgmma_m64n32k8_tf32(st, m3wg::sw128_kstep(smem_addr(s, s.ks()), kJob, k),
                              m3wg::sw128_kstep(smem_addr(s, s.qr()) + 4096 * wg, kJob, k));
  }
#pragma unroll
  for (int k = 0; k < P / 8; ++k) {
    m3wg::wgmma_m64n32k8_tf32(dm, m3wg::sw128_kstep(smem_addr(s, s.vt()), kJob, k),
                              m3wg::sw128_kstep(smem_addr(s, s.dy()) + 4096 * wg, kJob, k));
  }
  m3wg::wgmma_commit();
  m3wg::wgmma_wait<0>();
  const float* cl = s.vec(kCl);
  if ((wq >> 1) != wg) return;  // keys of the other half (warp-uniform): never read
  float rows[4][2] = {{0.f, 0.f}, {0.f, 0.f}, {0.f, 0.f}, {0.f, 0.f}};  // kTerms: G's column t sums
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int sk = 16 * wq + g + 8 * hh;
    float colg = 0.f;
#pragma unroll
    for (int jb = 0; jb < 4; ++jb) {
      const int tc = 32 * wg + 8 * jb + 2 * i;
      float m2[2], d2[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int t = tc + e;
        const bool live = sk <= t && t < len;
        const float w = live ? expf(cl[t] - cl[sk]) : 0.f;
        m2[e] = w * st[4 * jb + 2 * hh + e];
        d2[e] = w * dm[4 * jb + 2 * hh + e];
        if constexpr (kTerms) {
          const float gm = live ? dm[4 * jb + 2 * hh + e] * m2[e] : 0.f;  // G = dM * M
          colg += gm;
          rows[jb][e] += gm;
          terms.dmw[1024 * wg + m3wg::sw128_index(32, t - 32 * wg, sk - 32 * wg)] = d2[e];
        }
      }
      const int at = m3wg::sw128_index(32, sk - 32 * wg, tc - 32 * wg);
      *reinterpret_cast<float2*>(s.mt(wg) + at) = make_float2(m2[0], m2[1]);
      *reinterpret_cast<float2*>(s.dmwt(wg) + at) = make_float2(d2[0], d2[1]);
    }
    if constexpr (kTerms) {
      colg += __shfl_xor_sync(0xffffffffu, colg, 1);
      colg += __shfl_xor_sync(0xffffffffu, colg, 2);
      if (i == 0) terms.colg[sk] = colg;
    }
  }
  if constexpr (kTerms) {
#pragma unroll
    for (int jb = 0; jb < 4; ++jb) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float x = rows[jb][e];
#pragma unroll
        for (int off = 4; off < 32; off <<= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
        if ((threadIdx.x & 31) < 4) terms.rowpart[(wq & 1) * 64 + 32 * wg + 8 * jb + 2 * i + e] = x;
      }
    }
  }
}

// 3. V_h^T of both halves (before the wait), then the chain: gl the gradient of the state leaving
// the job (the successor's hand-off, or dfinal_ssm's), G_0 into v1 (gl is G_1 when the job has two
// halves), alpha_0 G_0 + V_0 handed to the predecessor with its flag (v0 is dead after). Ends with
// a barrier.
template <class Tiles>
M3_DEV void chain_gradients(const M3Params& p, const Job64& job, const Tiles& s, int len, long long slot0, bool last_job,
                            int n0, int i, float (&v0)[32], float (&v1)[32], float (&gl)[32]) {
  const int H = p.H, tid = threadIdx.x, wg = tid >> 7, wq = (tid >> 5) & 3, lane = tid & 31;
  m3wg::zero_accumulator(v0);
  m3wg::zero_accumulator(v1);
  {
    // Both halves' register operands before the one fence: a register operand rewritten while an
    // earlier product may still read it makes ptxas inject a wait (C7517/C7519) between them.
    const unsigned dyte_a = smem_addr(s, s.dyte());
    float a0[4][4], a1[4][4];
    transposed_fragments(s.qr(), 0, n0, i, a0);
    transposed_fragments(s.qr(), 32, n0, i, a1);
    m3wg::wgmma_fence();
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      m3wg::wgmma_m64n64k8_tf32_rs(v0, a0[k][0], a0[k][1], a0[k][2], a0[k][3], m3wg::sw128_kstep(dyte_a, P, k));
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      m3wg::wgmma_m64n64k8_tf32_rs(v1, a1[k][0], a1[k][1], a1[k][2], a1[k][3], m3wg::sw128_kstep(dyte_a, P, 4 + k));
    }
    m3wg::wgmma_commit();
    m3wg::wgmma_wait<0>();
  }
  const float4* hand_in = reinterpret_cast<const float4*>(p.ws_dstates + (slot0 + 2 * H) * P * N) + (4 * wg + wq) * 8 * 32 + lane;
  if (!last_job) {
    wait_for(forward_flags(p) + slot0 + 2 * H);
#pragma unroll
    for (int jb = 0; jb < 8; ++jb) {
      const float4 w = __ldcg(hand_in + 32 * jb);
      gl[4 * jb] = w.x, gl[4 * jb + 1] = w.y, gl[4 * jb + 2] = w.z, gl[4 * jb + 3] = w.w;
    }
  } else {
    const float* dfs = p.dfinal_ssm ? p.dfinal_ssm + (static_cast<long long>(job.seq) * H + job.h) * P * N : nullptr;
#pragma unroll
    for (int jb = 0; jb < 8; ++jb) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float2 w = dfs ? *reinterpret_cast<const float2*>(dfs + p_at(jb, i, e) * N + n0) : make_float2(0.f, 0.f);
        gl[4 * jb + e] = w.x;
        gl[4 * jb + 2 + e] = w.y;
      }
    }
  }
  const bool second = len > C;
  const float alpha0 = s.scalars()[kAlpha0], alpha1 = s.scalars()[kAlpha1];
#pragma unroll
  for (int e = 0; e < 32; ++e) {
    const float g0 = second ? fmaf(alpha1, gl[e], v1[e]) : gl[e];
    v1[e] = g0;
    v0[e] = fmaf(alpha0, g0, v0[e]);
  }
  if (job.round > 0) {
    float4* out = reinterpret_cast<float4*>(p.ws_dstates + slot0 * P * N) + (4 * wg + wq) * 8 * 32 + lane;
#pragma unroll
    for (int jb = 0; jb < 8; ++jb) out[32 * jb] = make_float4(v0[4 * jb], v0[4 * jb + 1], v0[4 * jb + 2], v0[4 * jb + 3]);
    publish(forward_flags(p) + slot0);
  } else {
    __syncthreads();  // the same barrier as publish's
  }
  if (!last_job) discard_l2_line(hand_in - lane + 8 * lane);  // read for the last time, no write-back
}

M3_DEV void backward64kv_job(const M3Params& p, const SmemKV& s, const Job64& job) {
  const int H = p.H, tid = threadIdx.x;
  const int wg = tid >> 7, wq = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, i = lane & 3;
  const int jobs = (job.len + kJob - 1) / kJob;
  const int a = job.round * kJob, len = min(kJob, job.len - a);
  const bool last_job = job.round == jobs - 1;
  const long long slot0 = (static_cast<long long>(job.chunk_base) + 2 * job.round) * H + job.h;
  const int n0 = 64 * wg + 16 * wq + 2 * g;

  // 1. Staging.
  if (tid < 64) token_scalars(p, job, s, tid >> 5, a, len);
  angle_sums(p, job, s, a, len, slot0);
  stage_dy_v(p, job, s, a, len);
  __syncthreads();
  stage_qk(p, job, s, a, len, /*last=*/false);
  stage_dyte(s);
  m3wg::fence_shared_for_async_proxy();
  __syncthreads();

  // 2, 3. The transposed scores' tiles, then V and the chain (its barrier covers the tiles).
  transposed_scores<false>(s, len, wg, wq, g, i);
  m3wg::fence_shared_for_async_proxy();
  float v0[32], v1[32], gl[32];
  chain_gradients(p, job, s, len, slot0, last_job, n0, i, v0, v1, gl);

  // 4, 5. G tiles (half 0's from v1, half 1's from gl), dks^T per half, dv per warpgroup's half.
  const bool second = len > C;
  store_g_tile(s, 0, v1, n0, i);
  if (second) store_g_tile(s, 1, gl, n0, i);
  m3wg::fence_shared_for_async_proxy();
  dk_half<false>(p, job, s, v1, 0, a, len, n0, i, last_job);
  if (second) dk_half<false>(p, job, s, gl, 1, a, len, n0, i, last_job);
  __syncthreads();  // both G tiles whole
  // Both warpgroups run it (a product in a branch per warpgroup serializes them all); a half with
  // no tokens computes on a stale G tile and stores nothing.
  dv_half<false>(p, job, s, wg, wq, g, i, a, len, last_job);
}
}  // namespace m3b64kv

// One CTA an SM (208 KB of shared memory). Tickets from the forward's counter, after its CTAs'.
extern "C" __global__ void __launch_bounds__(M3_THREADS, 1) m3_cp_backward64kv(const M3Params p) {
  using namespace m3b64kv;
  extern __shared__ float4 smem_raw[];
  __shared__ int job_words[8];
  m3_wait_for_previous_kernel();  // the forward's states and counter, the q side before it
  const Job64 job = take_ticket64<true>(p, job_words);
  if (job.seq < 0) return;
  const unsigned raw = static_cast<unsigned>(__cvta_generic_to_shared(smem_raw));
  const unsigned pad = (1024u - (raw & 1023u)) & 1023u;
  const SmemKV s{{reinterpret_cast<char*>(smem_raw) + pad, raw + pad}};
  backward64kv_job(p, s, job);
}
