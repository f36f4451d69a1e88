// The q side of a chunk-64 backward on warpgroup tile products (M3_CP_BACKWARD64Q, v121): one CTA
// of two warpgroups per (64 tokens, head) job, as m3_cp_forward64, computing each token's per-head
// dq (ws_dqh) and each chunk's dq_bias partial. Included after m3_forward64.cuh, whose staging it
// shares.
//
// Why: the backward is two thirds of the call (run 85: 651.6 of c01's 957 us) and, like the
// forward, bound by the L1 data pipe (run 86). The design note ("The backward on wgmma") splits it
// into a q side and a k/v side that each fit in shared memory; this kernel is the q side's first
// step. It needs no state-gradient chain: dqr = (dM * W) KS + e (dy S) reads only the forward's
// entering states, so its jobs are independent (no tickets, no flags). v121 runs it between the
// forward and v103's backward, which then leaves ws_dqh and the dq half of its bias partials
// alone (M3_CP_BACKWARD64Q in m3_chunk_scan.cuh): every other result is v103's, and dq and dq_bias
// check this kernel against the float64 truth end to end.
//
// A job, warpgroup wg = 0, 1 (threads 128 wg ..), its four warps wq, lane = 4 g + i:
//   1. scalars and angles (m3_forward64's), KS (and QR, which the dphi and u terms of the full q
//      side will read) into the K-major swizzled tiles; dy = dout z sigmoid(z) and v as fp32
//      swizzled tiles [t][p], and dy . v per token;
//   2. dM = dy v^T, warpgroup wg the keys of half wg (both operands in shared memory); dM W of
//      that half (W = exp(cl_t - cl_s) on the causal part) into a [t][s] tile over v's;
//   3. per half h: dqr^T [n][t] = S_h^T (dy_h)^T, scaled by e_t, + KS_h^T (dM W)_h^T, warpgroup wg
//      the rows n = 64 wg .. 64 wg + 63, both A operands in registers: S_h straight from the
//      forward's row-major ws_states, KS^T from the KS tile;
//   4. the epilogue in the accumulator's layout: rows are ordered so that position 16 w + g holds
//      n = 16 w + 2 g and position + 8 holds n + 1, which puts every rotary pair in one thread:
//      the inverse rotation, the gamma term, dqh out (8-byte stores), the bias partial by a quad
//      sum.
#pragma once

#include "m3_wgmma.cuh"

#if !M3_CP_FORWARD64
#error "M3_CP_BACKWARD64Q shares m3_forward64.cuh's staging and job table: build it with M3_CP_FORWARD64"
#endif

namespace m3b64q {
using namespace m3f64;

// The dynamic shared memory, in bytes from a 1024-byte aligned base. dM W's two [32][32] tiles (one
// per half) go over v's once dM has read it.
enum : int {
  kQr = 0,
  kKs = 32768,
  kDy = 65536,        // fp32 [64][64], swizzled
  kVt = 81920,        // fp32 [64][64], swizzled; then dM W of half h at kVt + 4096 h
  kPhi = 98304,       // the angle tile, [64][kPhiStride]
  kVec = kPhi + kJob * kPhiStride * 4,
  kVecCount = 7,      // m3_forward64's six, then dy . v
  kScalars = kVec + kVecCount * kJob * 4,
  kSmemBytes = kScalars + 16 * 4,
  kDynamicSmem = kSmemBytes + 1024,  // with the alignment
};
enum : int { kDyv = 6 };
static_assert(kVt + 2 * 4096 <= kPhi && kVt + kJob * P * 4 <= kPhi && kDy + kJob * P * 4 <= kVt, "regions overlap");
static_assert(kDynamicSmem == kM3Backward64qSmemBytes, "the host launches with kM3Backward64qSmemBytes");

// The tiles every chunk-64 backward layout keeps at the same offsets (QR, KS, dy, v: m3_forward64's
// staging and both sides' phases read and write through these accessors) and the regions each
// places where it can (the angle tile, the vectors, the scalars). kKeeps: stage_qk also keeps q . k
// per token in vector kQkRawAt (the whole backward's tail needs it). Enumerators, not static
// constexpr members: those became device globals and moved every other global's address.
template <int kPhiAt, int kVecAt, int kScalarsAt, int kKeeps = 0, int kQkRawAt = 0>
struct BackwardTiles {
  enum : int { kKeepsQkRaw = kKeeps, kQkRawVec = kQkRawAt };
  char* base;
  unsigned addr;  // base's shared-window address
  M3_DEV float* at(int offset) const { return reinterpret_cast<float*>(base + offset); }
  M3_DEV float* qr() const { return at(kQr); }
  M3_DEV float* ks() const { return at(kKs); }
  M3_DEV float* dy() const { return at(kDy); }
  M3_DEV float* vt() const { return at(kVt); }
  M3_DEV float* phi() const { return at(kPhiAt); }
  M3_DEV float* vec(int which) const { return at(kVecAt) + which * kJob; }
  M3_DEV float* scalars() const { return at(kScalarsAt); }
};

struct SmemQ : BackwardTiles<kPhi, kVec, kScalars> {
  M3_DEV float* dmw(int h) const { return at(kVt + 4096 * h); }  // over v, once dM has read it
};

// A warp's partial sum of a per-token term: x summed over the warp's 8 lanes that share i (g
// varies, a fixed butterfly), stored by lanes 0 .. 3 as part[row * 32 + t].
M3_DEV void store_warp_partial(float x, float* part, int row, int t) {
#pragma unroll
  for (int off = 4; off < 32; off <<= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
  if ((threadIdx.x & 31) < 4) part[row * 32 + t] = x;
}

// Multiplies each token column of a half's m64n32 accumulator (d[4 jb + e], d[4 jb + 2 + e]: token
// 8 jb + 2 i + e) by that token's weight w[token].
M3_DEV void scale_token_columns(float (&acc)[16], const float* w, int i) {
#pragma unroll
  for (int jb = 0; jb < 4; ++jb) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float x = w[8 * jb + 2 * i + e];
      acc[4 * jb + e] *= x;
      acc[4 * jb + 2 + e] *= x;
    }
  }
}

// The shared-window address of a pointer into a layout's tiles.
template <class Tiles>
M3_DEV unsigned smem_addr(const Tiles& s, const void* ptr) {
  return s.addr + static_cast<unsigned>(reinterpret_cast<const char*>(ptr) - s.base);
}

// Where the full backward (m3_backward64.cuh) collects the per-token terms of a half that its tail
// needs: the angle gradient tile dphi [32][LDA] (the q side writes its part, the k side adds its
// own) and the per-warp partial sums part[warp][32] of the term the function computes (u, dsc or
// x). The q and k/v sides alone (v121, v123) compute none of them (kTerms false).
struct TermOut {
  float* dphi;
  float* part;
};

// dy = dout z sigmoid(z) (v103's backward's formula) and v, as fp32 rows of the swizzled tiles,
// eight consecutive p a thread; dy . v per token over its eight lanes (a fixed butterfly). Written
// against the layout's accessors: the k/v side (m3_backward64kv.cuh) stages the same tiles.
template <class Tiles>
M3_DEV void stage_dy_v(const M3Params& p, const Job64& job, const Tiles& s, int a, int len) {
  const int H = p.H;
#pragma unroll
  for (int it = 0; it < kJob * P / 8 / NT; ++it) {
    const int item = threadIdx.x + it * NT, t = item >> 3, pc = 8 * (item & 7);
    float dy[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f}, vv[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (t < len) {
      const long long idx = ((static_cast<long long>(job.start) + a + t) * H + job.h) * P + pc;
      unpack_bf16x8(ldg16(p.v + idx), vv);
      if (p.dout) {
        float zz[8];
        unpack_bf16x8(ldg16(p.z + idx), zz);
        unpack_bf16x8(ldg16(p.dout + idx), dy);
#pragma unroll
        for (int j = 0; j < 8; ++j) dy[j] = dy[j] * zz[j] * sigmoidf(zz[j]);
      }
    }
    float dyv = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) dyv = fmaf(dy[j], vv[j], dyv);
#pragma unroll
    for (int off = 4; off > 0; off >>= 1) dyv += __shfl_xor_sync(0xffffffffu, dyv, off);
    if ((item & 7) == 0) s.vec(kDyv)[t] = dyv;
    // The token's lanes 4 .. 7 (p >= 32, the second 128-byte block) store their second 16 bytes
    // first: with the swizzle, each quarter warp's 16-byte stores then meet 32 distinct banks
    // (bank model: 8 wavefronts an instruction in order, 4 this way).
    const int first = 4 * ((item >> 2) & 1);
    const float4 dlo = make_float4(dy[0], dy[1], dy[2], dy[3]), dhi = make_float4(dy[4], dy[5], dy[6], dy[7]);
    const float4 vlo = make_float4(vv[0], vv[1], vv[2], vv[3]), vhi = make_float4(vv[4], vv[5], vv[6], vv[7]);
    *reinterpret_cast<float4*>(s.dy() + m3wg::sw128_index(kJob, t, pc + first)) = first ? dhi : dlo;
    *reinterpret_cast<float4*>(s.dy() + m3wg::sw128_index(kJob, t, pc + 4 - first)) = first ? dlo : dhi;
    *reinterpret_cast<float4*>(s.vt() + m3wg::sw128_index(kJob, t, pc + first)) = first ? vhi : vlo;
    *reinterpret_cast<float4*>(s.vt() + m3wg::sw128_index(kJob, t, pc + 4 - first)) = first ? vlo : vhi;
  }
}

// dqr^T of half h for this warpgroup's rows n: the inter part from the entering state `st`
// (row-major [p][n]; nullptr: zero), scaled by e_t, then the intra part. On return acc holds, for
// each block jb of 8 tokens, d[4 jb + e] = (n0, token 8 jb + 2 i + e) and d[4 jb + 2 + e] = (n0 + 1,
// same) with n0 = 64 wg + 16 wq + 2 g. With kTerms, u[t] = qr[t] . (the inter part of dqr[t]) is
// left as per-warp partial sums in terms.part.
template <bool kTerms, class Tiles>
M3_DEV void dqr_half(const Tiles& s, const float* st, int h, int n0, int i, float (&acc)[16], TermOut terms = {}) {
  m3wg::zero_accumulator(acc);
  {
    // A(16 w + g, k) = S^T(n0, k) = S(k, n0), A(16 w + g + 8, k) = S(k, n0 + 1): one 8-byte load
    // per pair; the rows p = 8 k + i and + 4 of the k-step.
    float a[8][4];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float2 lo = st ? __ldg(reinterpret_cast<const float2*>(st + (8 * k + i) * N + n0)) : make_float2(0.f, 0.f);
      const float2 hi = st ? __ldg(reinterpret_cast<const float2*>(st + (8 * k + i + 4) * N + n0)) : make_float2(0.f, 0.f);
      a[k][0] = lo.x, a[k][1] = lo.y, a[k][2] = hi.x, a[k][3] = hi.y;
    }
    const unsigned dy_a = smem_addr(s, s.dy()) + 4096 * h;  // the half's 32 token rows of every block
    m3wg::wgmma_fence();
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      m3wg::wgmma_m64n32k8_tf32_rs(acc, a[k][0], a[k][1], a[k][2], a[k][3], m3wg::sw128_kstep(dy_a, kJob, k));
    }
    m3wg::wgmma_commit();
    m3wg::wgmma_wait<0>();
  }
  scale_token_columns(acc, s.vec(kE) + 32 * h, i);
  if constexpr (kTerms) {
    // u's partials: this thread's pair, then the warp's 8 pairs (lanes 4 g + i, g summed).
#pragma unroll
    for (int jb = 0; jb < 4; ++jb) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int t = 32 * h + 8 * jb + 2 * i + e;
        const float2 q = *reinterpret_cast<const float2*>(s.qr() + m3wg::sw128_index(kJob, t, n0));
        store_warp_partial(q.x * acc[4 * jb + e] + q.y * acc[4 * jb + 2 + e], terms.part, threadIdx.x >> 5, t - 32 * h);
      }
    }
  }
  {
    // A = KS^T of the half: (n0, s) and (n0 + 1, s) are one 8-byte word of KS's row s.
    float a[4][4];
    const float* ks = s.ks();
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int s0 = 32 * h + 8 * k + i;
      const float2 lo = *reinterpret_cast<const float2*>(ks + m3wg::sw128_index(kJob, s0, n0));
      const float2 hi = *reinterpret_cast<const float2*>(ks + m3wg::sw128_index(kJob, s0 + 4, n0));
      a[k][0] = lo.x, a[k][1] = lo.y, a[k][2] = hi.x, a[k][3] = hi.y;
    }
    const unsigned dmw_a = smem_addr(s, s.dmw(h));
    m3wg::wgmma_fence();
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      m3wg::wgmma_m64n32k8_tf32_rs(acc, a[k][0], a[k][1], a[k][2], a[k][3], m3wg::sw128_kstep(dmw_a, 32, k));
    }
    m3wg::wgmma_commit();
    m3wg::wgmma_wait<0>();
  }
}

// dqh = R(-phi) dqr + (dqk gamma) (k + k_bias) for the thread's rotary pair (n0, n0 + 1) and eight
// tokens of half h; ws_dqh gets them, and the half's chunk its dq_bias partial (quad sums in a
// fixed order). With kTerms, the pair's angle gradient qr x dqr goes to terms.dphi.
template <bool kTerms, class Tiles>
M3_DEV void dqh_epilogue(const M3Params& p, const Job64& job, const Tiles& s, const float (&acc)[16], int h, int a,
                         int len, int n0, int i, long long row, TermOut terms = {}) {
  const int H = p.H, pair = n0 >> 1;
  const float2 kb = *reinterpret_cast<const float2*>(p.k_bias + job.h * N + n0);
  float b0 = 0.f, b1 = 0.f;
#pragma unroll
  for (int jb = 0; jb < 4; ++jb) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int t = 32 * h + 8 * jb + 2 * i + e;
      if (t >= len) continue;
      const float d0 = acc[4 * jb + e], d1 = acc[4 * jb + 2 + e];
      float u0 = d0, u1 = d1;
      if (pair < A) {
        float sn, cs;
        m3_sincos(s.phi()[t * kPhiStride + pair], &sn, &cs);
        u0 = d0 * cs + d1 * sn;
        u1 = -d0 * sn + d1 * cs;
        if constexpr (kTerms) {
          const float2 q = *reinterpret_cast<const float2*>(s.qr() + m3wg::sw128_index(kJob, t, n0));
          terms.dphi[(t - 32 * h) * LDA + pair] = q.x * d1 - q.y * d0;
        }
      }
      const long long tg = static_cast<long long>(job.start) + a + t;
      const unsigned kraw = *reinterpret_cast<const unsigned*>(p.k + tg * N + n0);
      const float k0 = bf2f(static_cast<m3_bf16>(kraw & 0xffffu)) + kb.x;
      const float k1 = bf2f(static_cast<m3_bf16>(kraw >> 16)) + kb.y;
      const float gt = -s.vec(kDyv)[t] * s.vec(kGam)[t];
      const float q0 = fmaf(gt, k0, u0), q1 = fmaf(gt, k1, u1);
      *reinterpret_cast<float2*>(p.ws_dqh + (tg * H + job.h) * N + n0) = make_float2(q0, q1);
      b0 += q0;
      b1 += q1;
    }
  }
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    b0 += __shfl_xor_sync(0xffffffffu, b0, off);
    b1 += __shfl_xor_sync(0xffffffffu, b1, off);
  }
  if (i == 0) {
    float* part = p.ws_partial + row * (2 * N + 1) + n0;  // rows of 2 N + 1 words: 4-byte aligned only
    part[0] = b0;
    part[1] = b1;
  }
}

M3_DEV void backward64q_job(const M3Params& p, const SmemQ& s, const Job64& job) {
  const int H = p.H, tid = threadIdx.x;
  const int wg = tid >> 7, wq = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, i = lane & 3;
  const int a = job.round * kJob, len = min(kJob, job.len - a);
  const long long slot0 = (static_cast<long long>(job.chunk_base) + 2 * job.round) * H + job.h;

  // 1. Staging.
  if (tid < 64) token_scalars(p, job, s, tid >> 5, a, len);
  angle_sums(p, job, s, a, len, slot0);
  stage_dy_v(p, job, s, a, len);
  __syncthreads();
  stage_qk(p, job, s, a, len, /*last=*/false);
  m3wg::fence_shared_for_async_proxy();
  __syncthreads();

  // 2. dM of half wg's keys against all 64 tokens (the other half's rows are never read), then dM W.
  {
    float dm[16];
    m3wg::zero_accumulator(dm);
    m3wg::wgmma_fence();
#pragma unroll
    for (int k = 0; k < P / 8; ++k) {
      m3wg::wgmma_m64n32k8_tf32(dm, m3wg::sw128_kstep(s.addr + kDy, kJob, k),
                                m3wg::sw128_kstep(s.addr + kVt + 4096 * wg, kJob, k));
    }
    m3wg::wgmma_commit();
    m3wg::wgmma_wait<0>();
    __syncthreads();  // both warpgroups' products have read v: dM W goes over it
    const float* cl = s.vec(kCl);
    float* dmw = s.dmw(wg);
#pragma unroll
    for (int jb = 0; jb < 4; ++jb) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int t = 16 * wq + g + 8 * hh, sc = 32 * wg + 8 * jb + 2 * i;
        if ((t >> 5) != wg) continue;  // the other half's rows
        float w2[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int sk = sc + e;
          w2[e] = (sk <= t && t < len) ? expf(cl[t] - cl[sk]) * dm[4 * jb + 2 * hh + e] : 0.f;
        }
        *reinterpret_cast<float2*>(dmw + m3wg::sw128_index(32, t - 32 * wg, sc - 32 * wg)) = make_float2(w2[0], w2[1]);
      }
    }
    m3wg::fence_shared_for_async_proxy();
    __syncthreads();
  }

  // 3, 4. Each half with tokens: dqr^T, then dqh out.
  const int n0 = 64 * wg + 16 * wq + 2 * g;
#pragma unroll 1
  for (int h = 0; h < 2; ++h) {
    if (32 * h >= len) break;
    // The state entering the half's chunk: the forward's ws_states slot, zero for a sequence's first.
    const float* st = (h == 0 && job.round == 0) ? nullptr : p.ws_states + (slot0 + h * H) * P * N;
    float acc[16];
    dqr_half<false>(s, st, h, n0, i, acc);
    dqh_epilogue<false>(p, job, s, acc, h, a, len, n0, i, slot0 + h * H);
  }
}
}  // namespace m3b64q

// Two CTAs an SM: 108 KB of shared memory each, at most 128 registers. A CTA per entry of the
// chunk-64 job table and head, in the table's order; entries past the last job leave at once.
extern "C" __global__ void __launch_bounds__(M3_THREADS, 2) m3_cp_backward64q(const M3Params p) {
  using namespace m3b64q;
  extern __shared__ float4 smem_raw[];
  m3_wait_for_previous_kernel();  // the forward's states, the angle kernel's table and angle sums
  const long long q = blockIdx.x / p.H;
  if (q >= p.chunk_capacity) return;
  const int4* entry = reinterpret_cast<const int4*>(p.ws_schedule + kScheduleInts * (p.chunk_capacity + q));
  const int4 first = entry[0], second = entry[1];
  if (first.x < 0) return;
  const Job64 job{first.x, first.y, static_cast<int>(blockIdx.x % p.H), first.z, second.x, second.y};
  const unsigned raw = static_cast<unsigned>(__cvta_generic_to_shared(smem_raw));
  const unsigned pad = (1024u - (raw & 1023u)) & 1023u;
  const SmemQ s{{reinterpret_cast<char*>(smem_raw) + pad, raw + pad}};
  backward64q_job(p, s, job);
}
