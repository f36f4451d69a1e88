// The chunk-64 backward on warpgroup tile products, whole (M3_CP_BACKWARD64, v125): one CTA of two
// warpgroups per (64 tokens, head) job, each sequence's jobs in reverse, computing every gradient
// the mma.sync backward (m3_cp_backward) computes, which v125 no longer launches. Included after
// m3_backward64kv.cuh; the q side's and the k/v side's device functions (m3_backward64q.cuh,
// m3_backward64kv.cuh) are its phases, here with the per-token terms their test beds leave out.
//
// Why: v121 and v123 test the two sides' schemes beside v103's backward; this kernel drops that
// backward (run 85: 651.6 of c01's 957 us) for one job that stages each tile once and shares it
// between the sides (design note, "The k/v side of the backward, built").
//
// A job (warpgroup wg, warp wq, lane = 4 g + i; halves h = 0, 1 of 32 tokens, v103's chunks):
//   1. staging: the k/v side's (angles, QR, KS, dy, v, e dy^T), with q . k kept per token, dt and
//      the gate per token, and the next chunk's first dt and gate for the tail;
//   2. the transposed scores (the k/v side's), here also G = dM * M's row and column sums (dc's
//      intra terms) and dM W untransposed (the q side's operand);
//   3. V and the chain (the k/v side's);
//   4. per half the q side (dqr from the forward's entering state and dM W; u's partials; dqh; the
//      q half of dphi), then per half the k side (dks from G and dM W; dsc's partials; dkh; the k
//      half of dphi), then dv by warpgroup (x's partials);
//   5. da = alpha_h <G_h, S_h> per half, the heads-done counts for the reduce beside the kernel;
//   6. per half, half 1 first: v103's tail (m3_cp_backward's backward_token_scalars_parallel, on a
//      view of this job's tiles): Phi and dangles, dadt's reverse cumsum, ddt and dtrap with the
//      one-token shift; its carries from the successor job (ws_tail and its flag, as v103's) and to
//      the predecessor; dd's partial.
#pragma once

#include "m3_wgmma.cuh"

#if !M3_CP_BACKWARD64Q || !M3_CP_BACKWARD64KV
#error "M3_CP_BACKWARD64 is built from both sides' phases: build it with M3_CP_BACKWARD64Q and M3_CP_BACKWARD64KV"
#endif

namespace m3b64 {
using namespace m3b64kv;

// Shared memory, bytes from a 1024-byte aligned base: the k/v side's regions at the k/v side's
// offsets, then the q side's dM W tiles, the angle tile, the vectors and the tail's block. Over e
// dy^T once V has read it: the two halves' dphi tiles and the per-warp partial sums.
enum : int {
  kDmw = m3b64kv::kG + 2 * 32768,       // (dM W) [t][s] of half h at + 4096 h
  kPhiB = kDmw + 8192,
  kVecB = kPhiB + kJob * kPhiStride * 4,
  kVecBCount = 12,
  kScalarsB = kVecB + kVecBCount * kJob * 4,
  kTail = kScalarsB + 16 * 4,  // v103's vector block (m3scan::Smem::vec) for one chunk
  kTailFloats = C * ::kVecCount + 2 * A + 16,
  kRed = kTail + kTailFloats * 4,
  kRowPart = kRed + 16 * 4,    // G's row sums, two per-warp partials [2][64] (written before V)
  kSmemBytesB = kRowPart + 2 * kJob * 4,
  kDynamicSmemB = kSmemBytesB + 1024,
  // Over e dy^T, written only after V has read it:
  kDphi = m3b64kv::kDyTe,                          // [2][32][LDA]
  kUPart = kDphi + 2 * C * LDA * 4,       // [2][8][32]
  kDscPart = kUPart + 2 * NW * C * 4,     // [2][8][32]
  kXsPart = kDscPart + 2 * NW * C * 4,    // [2][4][32]
  // Over the G tiles, once dv has read them: the two halves' th tiles, [2][32][LDA].
  kTh = m3b64kv::kG,
};
static_assert(kXsPart + 2 * 4 * C * 4 <= m3b64kv::kMt, "the terms over e dy^T overlap M^T");
static_assert(kDynamicSmemB == kM3Backward64SmemBytes, "the host launches with kM3Backward64SmemBytes");
// Vectors past m3_forward64's six and the q side's dy . v.
enum : int { kQkRaw = 7, kDtV = 8, kPV = 9, kColG = 10, kDa = 11 };
// Scalars past alpha_0, alpha_1: the next chunk's first gate and dt after each half.
enum : int { kPNext0 = 2, kDtNext0 = 4 };

struct SmemB : KvTiles<BackwardTiles<kPhiB, kVecB, kScalarsB, 1, kQkRaw>> {
  M3_DEV float* dmw(int h) const { return at(kDmw + 4096 * h); }
};

// Per token of the job: dt and the gate sigmoid(trap) for the tail; after each half with tokens,
// the next token's (when the sequence has one) as that chunk's kScalarPNext / kScalarDtNext.
M3_DEV void stage_tail_scalars(const M3Params& p, const Job64& job, const SmemB& s, int a, int len) {
  const int t = threadIdx.x;
  if (t >= kJob) return;
  const long long row = static_cast<long long>(job.h) * p.T, tg = static_cast<long long>(job.start) + a + t;
  float dt = 0.f, pt = 0.f;
  if (t < len) {
    dt = p.dt[row + tg];
    pt = sigmoidf(bf2f(p.trap[row + tg]));
    const int half = t >> 5, half_last = min(len, 32 * half + 32) - 1;
    if (t == half_last && a + t + 1 < job.len) {
      s.scalars()[kPNext0 + half] = sigmoidf(bf2f(p.trap[row + tg + 1]));
      s.scalars()[kDtNext0 + half] = p.dt[row + tg + 1];
    }
  }
  s.vec(kDtV)[t] = dt;
  s.vec(kPV)[t] = pt;
}

// The entry of v103's chunk table (the reduce's block order) of chunk j of sequence seq: every
// entry of the rounds before the chunk's backward round, then those of earlier sequences in it.
M3_DEV int backward_entry(const M3Params& p, int seq, int j) {
  const int round = m3_seq_chunks(p.cu_seqlens, seq, C) - 1 - j;
  int q = 0;
  for (int s2 = 0; s2 < p.S; ++s2) {
    const int c = m3_seq_chunks(p.cu_seqlens, s2, C);
    q += min(c, round) + (s2 < seq && c > round ? 1 : 0);
  }
  return q;
}

// da_h = alpha_h <G_h, S_h> over the whole state (S_h: the forward's row-major entering state,
// nullptr zero), this thread's part; G_h^T in the chain's layout.
M3_DEV float da_part(const float (&gh)[32], const float* st, int n0, int i) {
  float x = 0.f;
  if (st) {
#pragma unroll
    for (int jb = 0; jb < 8; ++jb) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float2 w = __ldg(reinterpret_cast<const float2*>(st + p_at(jb, i, e) * N + n0));
        x = fmaf(gh[4 * jb + e], w.x, x);
        x = fmaf(gh[4 * jb + 2 + e], w.y, x);
      }
    }
  }
  return x;
}

// The whole block's sum of one value a thread, in a fixed order (warp sums, then warps 0 .. 7).
M3_DEV float block_total(float x, float* red) {
  x = warp_sum(x);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = x;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < NW; ++w) total += red[w];
  __syncthreads();
  return total;
}

// v103's tail vectors of half h (32 tokens) into its vector block, from this job's vectors and the
// partial sums (fixed orders); threads 0 .. 31.
M3_DEV void fill_tail_vectors(const SmemB& s, int h, float* vec) {
  const int t = threadIdx.x;
  if (t >= C) return;
  const int tj = 32 * h + t;
  const float* up = s.at(kUPart) + h * NW * C;
  const float* dp = s.at(kDscPart) + h * NW * C;
  const float* xp = s.at(kXsPart) + h * 4 * C;
  float u = 0.f, dsc = 0.f;
#pragma unroll
  for (int w = 0; w < NW; ++w) u += up[w * C + t], dsc += dp[w * C + t];
  vec[::kVecU * C + t] = u;
  vec[::kVecDsc * C + t] = dsc;
  vec[::kVecXs * C + t] = ((xp[t] + xp[C + t]) + xp[2 * C + t]) + xp[3 * C + t];
  vec[::kVecRowG * C + t] = s.at(kRowPart)[tj] + s.at(kRowPart)[kJob + tj];
  vec[::kVecColG * C + t] = s.vec(kColG)[tj];
  vec[::kVecDyv * C + t] = s.vec(kDyv)[tj];
  vec[::kVecQkRaw * C + t] = s.vec(kQkRaw)[tj];
  vec[::kVecDt * C + t] = s.vec(kDtV)[tj];
  vec[::kVecP * C + t] = s.vec(kPV)[tj];
  if (t == 0) {
    vec[C * ::kVecCount + 2 * A + ::kScalarPNext] = s.scalars()[kPNext0 + h];
    vec[C * ::kVecCount + 2 * A + ::kScalarDtNext] = s.scalars()[kDtNext0 + h];
  }
}

// The th tile of half h (pi tanh of the angles; zero past the chunk's tokens), as v103's staging
// leaves it for the tail.
M3_DEV void stage_th(const M3Params& p, const Job64& job, float* th, int h, int a, int len) {
  for (int e = threadIdx.x; e < C * A; e += NT) {
    const int t = e / A, i = e % A, tj = 32 * h + t;
    float x = 0.f;
    if (tj < len) x = kM3Pi * tanhf(bf2f(p.angles[((static_cast<long long>(job.start) + a + tj) * p.H + job.h) * A + i]));
    th[angle_index(e, t)] = x;
  }
}

M3_DEV void backward64_job(const M3Params& p, const SmemB& s, const Job64& job, int* job_words) {
  const int H = p.H, tid = threadIdx.x;
  const int wg = tid >> 7, wq = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, i = lane & 3;
  const int jobs = (job.len + kJob - 1) / kJob;
  const int a = job.round * kJob, len = min(kJob, job.len - a);
  const bool last_job = job.round == jobs - 1, second = len > C;
  const long long slot0 = (static_cast<long long>(job.chunk_base) + 2 * job.round) * H + job.h;
  const int n0 = 64 * wg + 16 * wq + 2 * g;
  // The forward's entering states of the halves (nullptr: a sequence's first chunk, zero).
  const float* st0 = job.round == 0 ? nullptr : p.ws_states + slot0 * P * N;
  const float* st1 = p.ws_states + (slot0 + H) * P * N;

  // 1. Staging.
  if (tid < 64) token_scalars(p, job, s, tid >> 5, a, len);
  angle_sums(p, job, s, a, len, slot0);
  stage_dy_v(p, job, s, a, len);
  stage_tail_scalars(p, job, s, a, len);
  __syncthreads();
  stage_qk(p, job, s, a, len, /*last=*/false);
  stage_dyte(s);
  m3wg::fence_shared_for_async_proxy();
  __syncthreads();

  // 2, 3. The transposed scores with G's sums and dM W; V and the chain (its barrier covers them).
  transposed_scores<true>(s, len, wg, wq, g, i, ScoreTerms{s.vec(kColG), s.at(kRowPart), s.dmw(0)});
  m3wg::fence_shared_for_async_proxy();
  float v0[32], v1[32], gl[32];
  chain_gradients(p, job, s, len, slot0, last_job, n0, i, v0, v1, gl);
  // e dy^T is dead (V has read it): the terms' tiles go over it.

  // 4. The q side per half, the k side per half, dv by warpgroup.
#pragma unroll 1
  for (int h = 0; h < 2; ++h) {
    if (32 * h >= len) break;
    const TermOut terms{s.at(kDphi) + h * C * LDA, s.at(kUPart) + h * NW * C};
    float acc[16];
    dqr_half<true>(s, h == 0 ? st0 : st1, h, n0, i, acc, terms);
    dqh_epilogue<true>(p, job, s, acc, h, a, len, n0, i, slot0 + h * H, terms);
  }
  store_g_tile(s, 0, v1, n0, i);
  if (second) store_g_tile(s, 1, gl, n0, i);
  m3wg::fence_shared_for_async_proxy();
  dk_half<true>(p, job, s, v1, 0, a, len, n0, i, last_job, TermOut{s.at(kDphi), s.at(kDscPart)});
  if (second) dk_half<true>(p, job, s, gl, 1, a, len, n0, i, last_job, TermOut{s.at(kDphi) + C * LDA, s.at(kDscPart) + NW * C});
  __syncthreads();  // both G tiles whole
  dv_half<true>(p, job, s, wg, wq, g, i, a, len, last_job, TermOut{nullptr, s.at(kXsPart) + wg * 4 * C});

  // 5. da of each half (a barrier: every dq and dk row stored before the counts below).
  const float da0 = s.scalars()[kAlpha0] * block_total(da_part(v1, st0, n0, i), s.at(kRed));
  const float da1 = second ? s.scalars()[kAlpha1] * block_total(da_part(gl, st1, n0, i), s.at(kRed)) : 0.f;
  if (tid == 0) {
    // Each chunk's H jobs count in once its dq and dk rows are stored (the reduce waits for H);
    // the barriers above order every thread's stores before this release.
    const int j0 = 2 * job.round;
    asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(heads_done(p) + backward_entry(p, job.seq, j0)) : "memory");
    if (second) {
      asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(heads_done(p) + backward_entry(p, job.seq, j0 + 1)) : "memory");
    }
  }
  // The forward's states have been read for the last time: dropped from L2, no write-back.
  if (st0) discard_l2_line(st0 + tid * 32);
  if (second) discard_l2_line(st1 + tid * 32);

  // 6. The tail, half 1 first, v103's code on a view of this job's tiles.
  m3scan::Smem view{};
  view.vec = s.at(kTail);
  float* big_phi = view.vec + C * ::kVecCount + A;
  const SeqHead sh{job.h, job.seq, job.start, job.len, job.chunk_base};
  BackwardCarry bc{0.f, 0.f, 0.f, 0.f, 0.f};
  const int hl = second ? 1 : 0;
  if (tid < 32) {
    // The successor job's carries (its first chunk's record), unless this is the sequence's end.
    float phi_carry = 0.f, extra = 0.f;
    if (!last_job) {
      if (tid == 0) spin_acquire(tail_flags(p) + slot0 + 2 * H);
      __syncwarp();
      const float* rec = p.ws_tail + (slot0 + 2 * H) * kTailWords;
      phi_carry = __ldcg(rec + tid);
      extra = tid < 4 ? __ldcg(rec + A + tid) : 0.f;
    }
    big_phi[tid] = phi_carry;
    bc.dadt_run = __shfl_sync(0xffffffffu, extra, 0);
    bc.dc_pending = __shfl_sync(0xffffffffu, extra, 1);
    bc.ddt_first = __shfl_sync(0xffffffffu, extra, 2);
    bc.dp_first = __shfl_sync(0xffffffffu, extra, 3);
  }
#pragma unroll 1
  for (int h = hl; h >= 0; --h) {
    const int a_h = a + 32 * h, len_h = min(C, len - 32 * h);
    view.dphi = s.at(kDphi) + h * C * LDA;
    view.th = s.at(kTh) + h * C * LDA;
    stage_th(p, job, view.th, h, a, len);
    fill_tail_vectors(s, h, view.vec);
    __syncthreads();
    bc.dd_sum = 0.f;
    backward_token_scalars_parallel(p, sh, view, a_h, len_h, last_job && h == hl, h == 0 ? da0 : da1, 0.f, bc);
    if (tid == 0) p.ws_partial[(slot0 + h * H) * (2 * N + 1) + 2 * N] = bc.dd_sum;
    __syncthreads();  // the block is refilled for the next half
  }
  if (job.round > 0 && tid < 32) {
    // The carries for the predecessor job, at this job's first chunk (warp 0's writes, ordered by
    // the warp barrier before lane 0's release).
    float* rec = p.ws_tail + slot0 * kTailWords;
    rec[tid] = big_phi[tid];
    if (tid == 0) {
      rec[A] = bc.dadt_run;
      rec[A + 1] = bc.dc_pending;
      rec[A + 2] = bc.ddt_first;
      rec[A + 3] = bc.dp_first;
    }
    __syncwarp();
    if (tid == 0) asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(tail_flags(p) + slot0), "r"(1) : "memory");
  }
  (void)job_words;
}
}  // namespace m3b64

// One CTA an SM. Tickets from the forward's counter, after its CTAs'; v125 launches no other
// backward kernel, and the reduce beside it waits for each chunk's heads-done count.
extern "C" __global__ void __launch_bounds__(M3_THREADS, 1) m3_cp_backward64(const M3Params p) {
  using namespace m3b64;
  extern __shared__ float4 smem_raw[];
  __shared__ int job_words[8];
  m3_wait_for_previous_kernel();  // the forward's states and counter
  m3_allow_next_kernel<M3_CP_OVERLAPPED_REDUCE != 0>();  // the reduce
  {
    // The reduce sums partial_rows rows of ws_partial (the workspace's chunk capacity); the rows
    // past the last chunk have no job, so every CTA zeroes a share of them (v103's backward zeroes
    // them from its tickets past the last chunk; run 93 found them left as garbage here).
    if (threadIdx.x == 0) {
      int chunks = 0;
      for (int s2 = 0; s2 < p.S; ++s2) chunks += m3_seq_chunks(p.cu_seqlens, s2, C);
      job_words[7] = chunks;
    }
    __syncthreads();
    const long long rows = static_cast<long long>(p.partial_rows) * p.H;
    for (long long r = static_cast<long long>(job_words[7]) * p.H + blockIdx.x; r < rows; r += gridDim.x) {
      for (int c = threadIdx.x; c < 2 * N + 1; c += NT) p.ws_partial[r * (2 * N + 1) + c] = 0.f;
    }
  }
  const Job64 job = take_ticket64<true>(p, job_words);
  if (job.seq < 0) return;
  const unsigned raw = static_cast<unsigned>(__cvta_generic_to_shared(smem_raw));
  const unsigned pad = (1024u - (raw & 1023u)) & 1023u;
  const SmemB s{{{reinterpret_cast<char*>(smem_raw) + pad, raw + pad}}};
  backward64_job(p, s, job, job_words);
}
