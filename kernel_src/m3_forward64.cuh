// The chunk-64 forward on warpgroup tile products (M3_CP_FORWARD64, v119): one CTA of two
// warpgroups per (64 tokens, head) job, the two chunks of C = 32 that the angle kernel and the
// backward work in taken together. Included at the end of m3_chunk_parallel.cuh.
//
// Why: runs 48 and 86 found the mma.sync forward bound by the L1 data pipe (72.7% of its
// wavefront peak on c01), its products' scalar operand loads the largest part; runs 87 and 88
// measured wgmma tf32 products at a third of the wavefronts and three times the rate
// (methods/design-next-kernels.md, "A chunk-64 forward on wgmma" and its blueprint). The
// mathematics is v103's chunk by chunk: each 32-token half keeps its own chunk-local decays, its
// own angle carry from ws_phi and its own entering state (the second half's is the state the
// first leaves), so everything the backward reads (ws_states for every 32-token chunk, the final
// states) has the same meaning; the products are summed in other orders (within rounding).
//
// A job, warpgroup wg = 0, 1 (threads 128 wg ..), its four warps wq:
//   1. scalars (warps 0, 1: a lane per token of half wq), angles (all warps: a scan per angle
//      index and half), then q/k rows biased, rotated and scaled into the K-major swizzled tiles
//      QR [t][n] and KS [t][n] (16-byte stores), v into a bf16 tile; then KS^T [n][s] from KS,
//      its rows permuted (below);
//   2. U_half = (w v)^T KS^T for each half, warpgroup wg the state columns 64 wg .. 64 wg + 63,
//      (w v)^T the register operand: the chain's only product;
//   3. the chain: wait for the predecessor's flag, Z_j (this warpgroup's 64 state columns) from
//      the workspace straight into U's accumulator layout, Z_mid = alpha_0 Z_j + U_0 and
//      Z_end = alpha_1 Z_mid + U_1, Z_end out in the same layout, the flag raised; then both
//      row-major for the backward (ws_states of the second chunk and of the next job's first) or
//      as the final state;
//   4. scores S = QR KS^T, warpgroup wg the keys of half wg (both operands in shared memory), and
//      the mixing matrix M = mask * exp(cl_t - cl_s) * S of each half written over KS;
//   5. y^T (64 x 64) = e_t Z qr_t (Z_j for the first half's tokens, Z_mid for the second's, Z the
//      register operand) + the intra part v^T M^T, each warpgroup over its 64 state columns and
//      its half's intra part, into two fp32 tiles;
//   6. every thread: the sum, the skip term, the gate, output and dz.
// The order keeps the job within 128 registers (two CTAs an SM) with no product serialized
// (ptxas: 48 bytes of stack, 16 bytes of spill stores); held across the chain, the scores'
// accumulators pushed it past 128 and ptxas serialized every product.
// KS^T's rows are stored permuted (position 8b + 2i holds state column 8b + i, 8b + 2i + 1 holds
// 8b + i + 4, i < 4), so that U's accumulator, and with it Z, holds for each block of eight
// columns exactly the (i, i + 4) pair that wgmma's register operand takes (design note, (a)).
// The chain's workspace holds Z in that layout (ws_dstates, which the backward overwrites only
// after this kernel), 512 contiguous bytes a warp instruction.
#pragma once

#include "m3_wgmma.cuh"

#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "M3_CP_FORWARD64 runs warpgroup products: compile for sm_90a"
#endif
#if !M3_CP_RICH_SCHEDULE || !M3_CP_TRIMS || M3_CP_PERSISTENT || M3_CP_OVERLAPPED_BACKWARD || M3_PDL
#error "M3_CP_FORWARD64 is wired into v103's chunk-parallel kernels (rich schedule, one job per CTA)"
#endif

namespace m3f64 {
using namespace m3cp;

static_assert(C == 32 && N == 128 && P == 64 && A == 32 && NT == 256,
              "the chunk-64 forward is written for SPEC's dimensions, chunks of 32 and 256 threads");

enum : int { kJob = 2 * C };  // tokens of a job

// The dynamic shared memory, in bytes from a 1024-byte aligned base (the swizzle is applied to
// absolute address bits). Regions are reused as the job goes on:
//   kQr: QR, the whole job;  kR1: KS, then M;  kR2: the angles, then KS^T, then the two y tiles.
enum : int {
  kQr = 0,
  kR1 = 32768,
  kR2 = 65536,
  kV = 98304,                  // bf16 [64][kVStride]
  kVStride = 72,               // bf16 a row: conflict-free v^T fragments (lanes 8 t + g / 2 distinct words)
  kVec = kV + kJob * kVStride * 2,
  kVecCount = 6,               // per-token vectors below
  kScalars = kVec + kVecCount * kJob * 4,
  kSmemBytes = kScalars + 16 * 4,
  kPhiStride = 36,             // floats a row of the angle tile (16-byte writes and reads conflict-free)
  kYTile = 64 * 64 * 4,        // bytes of one y^T tile [t][p]
  kDynamicSmem = kSmemBytes + 1024,  // with the alignment
};
static_assert(kDynamicSmem == kM3Forward64SmemBytes, "the host launches with kM3Forward64SmemBytes");
static_assert(kV >= kR2 + 32768 && kJob * kPhiStride * 4 <= 32768 && 2 * kYTile <= 32768, "regions overlap");
// Per-token vectors: the chunk-local cumsum of adt, its exp (the decay from the chunk's start),
// the state weight exp(cl_last - cl_t), the skip coefficient d - qk raw * gamma, and the inputs
// of the weight: the scale sc is folded into KS.
enum : int { kCl, kE, kWb, kSkip, kSc, kGam };
// Scalars: the decay of each half (alpha_0, alpha_1).
enum : int { kAlpha0, kAlpha1 };

struct Smem64 {
  // stage_qk keeps q . k (the full backward's layout does). Enumerators, not static constexpr
  // members: those became device globals and moved every other global's address.
  enum : int { kKeepsQkRaw = 0, kQkRawVec = 0 };
  char* base;
  unsigned addr;  // its shared-window address
  M3_DEV float* qr() const { return reinterpret_cast<float*>(base + kQr); }
  M3_DEV float* ks() const { return reinterpret_cast<float*>(base + kR1); }
  M3_DEV float* m() const { return reinterpret_cast<float*>(base + kR1); }
  M3_DEV float* phi() const { return reinterpret_cast<float*>(base + kR2); }
  M3_DEV float* kst() const { return reinterpret_cast<float*>(base + kR2); }
  M3_DEV float* y(int wg) const { return reinterpret_cast<float*>(base + kR2 + wg * kYTile); }
  M3_DEV m3_bf16* v() const { return reinterpret_cast<m3_bf16*>(base + kV); }
  M3_DEV float* vec(int which) const { return reinterpret_cast<float*>(base + kVec) + which * kJob; }
  M3_DEV float* scalars() const { return reinterpret_cast<float*>(base + kScalars); }
};

// KS^T's row position of state column n (see the top).
M3_DEV int permuted_column(int n) {
  const int i = n & 7;
  return (n & ~7) | (i < 4 ? 2 * i : 2 * (i - 4) + 1);
}

// A y^T tile [t][p]: p's blocks of eight XOR-ed with (t / 2) % 4, so that a warp's accumulator
// stores (8 p by 4 t) and its 16-byte row reads meet 32 distinct banks.
M3_DEV int y_index(int t, int p) { return t * 64 + (p ^ (8 * ((t >> 1) & 3))); }

struct Job64 {
  int seq, round, h, start, len, chunk_base;  // round: the job's index in its sequence
};

// Thread 0 draws a ticket and decodes it from the chunk-64 table that m3_cp_angles writes after
// the chunk table (ws_schedule + 8 chunk_capacity); seq = -1 past the last job.
// kBackward: the chunk-64 backward's ticket (m3_backward64kv.cuh, m3_backward64.cuh), drawn from the
// same counter after the forward's (T / 64 + S) H CTAs drew one each, with each sequence's jobs
// taken in reverse, so that a job's successor (the job it waits for) holds a smaller ticket.
template <bool kBackward = false>
M3_DEV Job64 take_ticket64(const M3Params& p, int* words) {
  if (threadIdx.x == 0) {
    const long long drawn_before = kBackward ? (static_cast<long long>(p.T) / kJob + p.S) * p.H : 0;
#if M3_CP_GUESSED_TICKET
    // v229: the row of the likely ticket (blockIdx.x's) in flight with the atomic (m3_cp_backward's
    // take_ticket does the same).
    // Not for the chunk-64 backward's tickets (drawn after the forward's from the same counter).
    const int* table = p.ws_schedule + kScheduleInts * p.chunk_capacity;
    const long long guess_q = kBackward ? -1 : static_cast<long long>(blockIdx.x) / p.H;
    int4 first, second;
    ticket_row(table, guess_q, guess_q >= 0 && guess_q < p.chunk_capacity, first, second);
    const long long t = atomicAdd(p.ws_sync, 1) - drawn_before;
    const long long q = t / p.H;
    if (q != guess_q) ticket_row(table, q, (!kBackward || t >= 0) && q >= 0 && q < p.chunk_capacity, first, second);
#else
    const long long t = atomicAdd(p.ws_sync, 1) - drawn_before;
    const long long q = t / p.H;
    int4 first, second;  // the second table, rows chunk_capacity on
    ticket_row(p.ws_schedule, p.chunk_capacity + q, (!kBackward || t >= 0) && q < p.chunk_capacity, first, second);
#endif
    words[0] = first.x;
    words[1] = kBackward ? (second.x + kJob - 1) / kJob - 1 - first.y : first.y;  // the round from the end
    words[2] = static_cast<int>(t % p.H);
    words[3] = first.z;
    words[4] = second.x;
    words[5] = second.y;
  }
  __syncthreads();
  return Job64{words[0], words[1], words[2], words[3], words[4], words[5]};
}

// The staging below is written against a layout's accessors (Smem64 here; the chunk-64 backward's
// layouts, BackwardTiles in m3_backward64q.cuh), so that the backward stages its tiles with the
// same code.

// Per-token scalars of one half (a warp, a lane per token): v103's load_chunk formulas, the
// chunk-local cumsum by the same warp scan.
template <class Tiles>
M3_DEV void token_scalars(const M3Params& p, const Job64& job, const Tiles& s, int half, int a, int len) {
  const int lane = threadIdx.x & 31, t = 32 * half + lane, T = p.T;
  const int half_len = max(0, min(32, len - 32 * half));
  float adt = 0.f, dt = 0.f, pt = 0.f, gam = 0.f;
  if (lane < half_len) {
    const long long tg = static_cast<long long>(job.start) + a + t;
    const long long row = static_cast<long long>(job.h) * T;
    adt = p.adt[row + tg];
    dt = p.dt[row + tg];
    pt = sigmoidf(bf2f(p.trap[row + tg]));
    if (a + t + 1 < job.len) gam = p.dt[row + tg + 1] * (1.f - sigmoidf(bf2f(p.trap[row + tg + 1])));
  }
  const float cl = warp_inclusive_scan(adt);
  const float cl_last = __shfl_sync(0xffffffffu, cl, max(half_len - 1, 0));
  const float e = m3_decay_expf(cl);
  s.vec(kCl)[t] = cl;
  s.vec(kE)[t] = e;
  s.vec(kWb)[t] = lane < half_len ? m3_decay_expf(cl_last - cl) : 0.f;
  s.vec(kSc)[t] = dt * pt + gam;
  s.vec(kGam)[t] = gam;
  if (lane == 0) s.scalars()[kAlpha0 + half] = half_len > 0 ? m3_decay_expf(cl_last) : 1.f;
}

// The angle sums phi[t][i] of the job's tokens into the angle tile: warp w scans angle indices
// 8 (w % 4) .. + 7 of half w / 4, a lane per token, by v103's scan (warp_inclusive_scan_n) from
// the half's carry in ws_phi.
template <class Tiles>
M3_DEV void angle_sums(const M3Params& p, const Job64& job, const Tiles& s, int a, int len, long long slot0) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int half = warp >> 2, i0 = 8 * (warp & 3), t = 32 * half + lane;
  const bool live = t < len;
  const int H = p.H;
  const long long tg = static_cast<long long>(job.start) + a + t;
  uint4 raw = make_uint4(0u, 0u, 0u, 0u);
  float dt = 0.f;
  if (live) {
    raw = ldg16(p.angles + (tg * H + job.h) * A + i0);
    dt = p.dt[static_cast<long long>(job.h) * p.T + tg];
  }
  float x[8];
  unpack_bf16x8(raw, x);
#pragma unroll
  for (int u = 0; u < 8; ++u) x[u] = live ? (kM3Pi * m3_tanhf(x[u])) * dt : 0.f;
  warp_inclusive_scan_n<8>(x);
  // The carry of the half's chunk; a half past the job's end has no chunk (nor slot) of its own.
  float carry[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  if (32 * half < len) load_f32x8(p.ws_phi + (slot0 + static_cast<long long>(half) * H) * A + i0, carry);
  float out[8];
#pragma unroll
  for (int u = 0; u < 8; ++u) out[u] = live ? x[u] + carry[u] : 0.f;
  float* row = s.phi() + t * kPhiStride + i0;
  *reinterpret_cast<float4*>(row) = make_float4(out[0], out[1], out[2], out[3]);
  *reinterpret_cast<float4*>(row + 4) = make_float4(out[4], out[5], out[6], out[7]);
}

#if M3_CP_F64_EARLY_LOADS >= 2
// angle_sums in two steps, the loads first (v131: issued with the job's other loads). The steps
// repeat angle_sums' lines rather than replace them: split, angle_sums compiled differently and
// v119's SASS would have moved.
struct AngleInputs {
  uint4 raw;
  float dt;
  float carry[8];
};

M3_DEV AngleInputs load_angle_inputs(const M3Params& p, const Job64& job, int a, int len, long long slot0) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int half = warp >> 2, i0 = 8 * (warp & 3), t = 32 * half + lane;
  const long long tg = static_cast<long long>(job.start) + a + t;
  AngleInputs in{make_uint4(0u, 0u, 0u, 0u), 0.f, {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f}};
  if (t < len) {
    in.raw = ldg16(p.angles + (tg * p.H + job.h) * A + i0);
    in.dt = p.dt[static_cast<long long>(job.h) * p.T + tg];
  }
  if (32 * half < len) load_f32x8(p.ws_phi + (slot0 + static_cast<long long>(half) * p.H) * A + i0, in.carry);
  return in;
}

M3_DEV void angle_sums_from(const Smem64& s, int len, const AngleInputs& in) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int half = warp >> 2, i0 = 8 * (warp & 3), t = 32 * half + lane;
  const bool live = t < len;
  float x[8];
  unpack_bf16x8(in.raw, x);
#pragma unroll
  for (int u = 0; u < 8; ++u) x[u] = live ? (kM3Pi * m3_tanhf(x[u])) * in.dt : 0.f;
  warp_inclusive_scan_n<8>(x);
  float* row = s.phi() + t * kPhiStride + i0;
  *reinterpret_cast<float4*>(row) = make_float4(live ? x[0] + in.carry[0] : 0.f, live ? x[1] + in.carry[1] : 0.f,
                                                live ? x[2] + in.carry[2] : 0.f, live ? x[3] + in.carry[3] : 0.f);
  *reinterpret_cast<float4*>(row + 4) = make_float4(live ? x[4] + in.carry[4] : 0.f, live ? x[5] + in.carry[5] : 0.f,
                                                    live ? x[6] + in.carry[6] : 0.f, live ? x[7] + in.carry[7] : 0.f);
}
#endif

// q and k rows: 16 lanes per token, 8 consecutive columns a lane; biased, rotated (pairs below A),
// k scaled; QR and KS rows as 16-byte stores into the swizzled tiles. Also qk raw (the skip
// coefficient) and, for the sequence's last token, final_k (kr unscaled).
enum : int { kQkPasses = kJob / (NT / 16) };  // tokens a thread stages

// A thread's raw q and k rows (16 lanes per token, 8 consecutive columns a lane) and what their
// staging reads beside them: loaded apart from the staging, so that a job can issue these loads
// before its scalars and angles (M3_CP_F64_EARLY_LOADS) instead of after the barrier that follows them.
struct QkRows {
  float dh;
  uint4 q[kQkPasses], k[kQkPasses];
  float qb[8], kb[8];
};

M3_DEV QkRows load_qk_rows(const M3Params& p, const Job64& job, int a, int len) {
  const int tid = threadIdx.x, o = tid & 15, r0 = tid >> 4;
  QkRows r;
  r.dh = p.d[job.h];
#pragma unroll
  for (int ps = 0; ps < kQkPasses; ++ps) {
    const int t = 16 * ps + r0;
    const long long tg = static_cast<long long>(job.start) + a + t;
    r.q[ps] = t < len ? ldg16(p.q + tg * N + 8 * o) : make_uint4(0u, 0u, 0u, 0u);
    r.k[ps] = t < len ? ldg16(p.k + tg * N + 8 * o) : make_uint4(0u, 0u, 0u, 0u);
  }
  load_f32x8(p.q_bias + job.h * N + 8 * o, r.qb);
  load_f32x8(p.k_bias + job.h * N + 8 * o, r.kb);
  return r;
}

template <class Tiles>
M3_DEV void stage_qk(const M3Params& p, const Job64& job, const Tiles& s, int a, int len, bool last, const QkRows& rows) {
  const int tid = threadIdx.x, o = tid & 15, r0 = tid >> 4;
  const float dh = rows.dh;
#pragma unroll
  for (int ps = 0; ps < kQkPasses; ++ps) {
    const int t = 16 * ps + r0;
    const bool live = t < len;
    float qh[8], kh[8];
    unpack_bf16x8(rows.q[ps], qh);
    unpack_bf16x8(rows.k[ps], kh);
    float raw = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      qh[j] = live ? qh[j] + rows.qb[j] : 0.f;
      kh[j] = live ? kh[j] + rows.kb[j] : 0.f;
      raw = fmaf(qh[j], kh[j], raw);
    }
    if (live && 4 * o < A) {
      const float4 ph0 = *reinterpret_cast<const float4*>(s.phi() + t * kPhiStride + 4 * o);
      const float ph[4] = {ph0.x, ph0.y, ph0.z, ph0.w};
#pragma unroll
      for (int jp = 0; jp < 4; ++jp) {
        float sn, cs;
        m3_sincos(ph[jp], &sn, &cs);
        const float q0 = qh[2 * jp], q1 = qh[2 * jp + 1], k0 = kh[2 * jp], k1 = kh[2 * jp + 1];
        qh[2 * jp] = q0 * cs - q1 * sn;
        qh[2 * jp + 1] = q0 * sn + q1 * cs;
        kh[2 * jp] = k0 * cs - k1 * sn;
        kh[2 * jp + 1] = k0 * sn + k1 * cs;
      }
    }
    if (last && t == len - 1) {
      float* fk = p.final_k + (static_cast<long long>(job.seq) * p.H + job.h) * N + 8 * o;
      store_f32x8(fk, kh);
    }
    const float sc = live ? s.vec(kSc)[t] : 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) kh[j] *= sc;
    float* qr = s.qr() + m3wg::sw128_index(kJob, t, 8 * o);
    float* ks = s.ks() + m3wg::sw128_index(kJob, t, 8 * o);
    // The second 16-byte chunk of the octet is chunk ((8 o + 4) / 4) ^ (t % 8) of the same block.
    float* qr4 = s.qr() + m3wg::sw128_index(kJob, t, 8 * o + 4);
    float* ks4 = s.ks() + m3wg::sw128_index(kJob, t, 8 * o + 4);
#if M3_CP_F64_SWAPPED_QK
    {
      const bool h = (o >> 2) & 1;
      const float4 qlo = make_float4(qh[0], qh[1], qh[2], qh[3]), qhi = make_float4(qh[4], qh[5], qh[6], qh[7]);
      const float4 klo = make_float4(kh[0], kh[1], kh[2], kh[3]), khi = make_float4(kh[4], kh[5], kh[6], kh[7]);
      *reinterpret_cast<float4*>(h ? qr4 : qr) = h ? qhi : qlo;
      *reinterpret_cast<float4*>(h ? qr : qr4) = h ? qlo : qhi;
      *reinterpret_cast<float4*>(h ? ks4 : ks) = h ? khi : klo;
      *reinterpret_cast<float4*>(h ? ks : ks4) = h ? klo : khi;
    }
#else
    *reinterpret_cast<float4*>(qr) = make_float4(qh[0], qh[1], qh[2], qh[3]);
    *reinterpret_cast<float4*>(qr4) = make_float4(qh[4], qh[5], qh[6], qh[7]);
    *reinterpret_cast<float4*>(ks) = make_float4(kh[0], kh[1], kh[2], kh[3]);
    *reinterpret_cast<float4*>(ks4) = make_float4(kh[4], kh[5], kh[6], kh[7]);
#endif
    // qk raw over the token's 16 lanes (a fixed butterfly: repeatable).
#pragma unroll
    for (int off = 8; off > 0; off >>= 1) raw += __shfl_xor_sync(0xffffffffu, raw, off);
    if (o == 0) s.vec(kSkip)[t] = live ? dh - raw * s.vec(kGam)[t] : 0.f;
    if constexpr (Tiles::kKeepsQkRaw != 0) {
      if (o == 0) s.vec(Tiles::kQkRawVec)[t] = live ? raw : 0.f;  // the full backward's tail (dgam)
    }
  }
}

template <class Tiles>
M3_DEV void stage_qk(const M3Params& p, const Job64& job, const Tiles& s, int a, int len, bool last) {
  stage_qk(p, job, s, a, len, last, load_qk_rows(p, job, a, len));
}

#if M3_CP_F64_NEIGHBOUR_PREFETCH
// Asks L2 for the input lines of the job's tokens a .. a + 63 (those in the sequence), at most two
// prefetches a thread and no loop (v59's prefetch_chunk_inputs, called per chunk of 32 here, added
// 370 instructions and 24 bytes of stack to the job): a line of v, z, dout or the angles per thread
// (which = tid / 64), eight of the q and k lines (h, h + H, ...: with H = 32 this head's share of
// the lines the H heads of a round all read), and the adt, dt and trap runs by their first, middle
// and last elements (64 fp32 span at most three lines, 64 bf16 at most two).
M3_DEV void prefetch_job_inputs(const M3Params& p, const Job64& job, int a) {
  static_assert(NT == 4 * kJob, "a thread per (input, token)");
  const int tid = threadIdx.x, H = p.H, n = min(kJob, job.len - a);
  if (n <= 0) return;
  const long long t0 = static_cast<long long>(job.start) + a;
  const int t = tid & (kJob - 1), which = tid >> 6;
  if (t < n) {
    const long long row = (t0 + t) * H + job.h;
    if (which == 0) prefetch_l2(p.v + row * P);
    if (which == 1) prefetch_l2(p.z + row * P);
    if (which == 2 && p.dout) prefetch_l2(p.dout + row * P);
    if (which == 3) prefetch_l2(p.angles + row * A);
  }
  if (tid < kJob / 8) {
    // q and k: four lines a token (two of each); this head's are lines h, h + H, ...
    const int line = job.h + H * tid, tq = line >> 2;
    if (line < 4 * kJob && tq < n) prefetch_l2(((line & 2) ? p.k : p.q) + (t0 + tq) * N + (line & 1) * (N / 2));
  } else if (tid < kJob / 8 + 8) {
    const int r = tid - kJob / 8;
    const long long e = static_cast<long long>(job.h) * p.T + t0;
    const int at = r % 3 == 0 ? 0 : r % 3 == 1 ? (n - 1) / 2 : n - 1;
    if (r < 3) prefetch_l2(p.adt + e + at);
    else if (r < 6) prefetch_l2(p.dt + e + at);
    else prefetch_l2(p.trap + e + (r == 6 ? 0 : n - 1));
  }
}
#endif

// v rows into the bf16 tile (dead rows zero), 16 bytes a thread.
M3_DEV void stage_v(const M3Params& p, const Job64& job, const Smem64& s, int a, int len) {
  for (int i = threadIdx.x; i < kJob * P / 8; i += NT) {
    const int t = i / (P / 8), c = 8 * (i % (P / 8));
    uint4 w = make_uint4(0u, 0u, 0u, 0u);
    if (t < len) w = ldg16(p.v + ((static_cast<long long>(job.start) + a + t) * p.H + job.h) * P + c);
    *reinterpret_cast<uint4*>(s.v() + t * kVStride + c) = w;
  }
}

#if M3_CP_F64_EARLY_LOADS >= 2
// The same in two steps, the loads first (v131: issued with the job's other loads).
enum : int { kVPasses = kJob * P / 8 / NT };
struct VRows {
  uint4 w[kVPasses];
};
M3_DEV VRows load_v_rows(const M3Params& p, const Job64& job, int a, int len) {
  VRows r;
#pragma unroll
  for (int ps = 0; ps < kVPasses; ++ps) {
    const int i = threadIdx.x + ps * NT, t = i / (P / 8), c = 8 * (i % (P / 8));
    r.w[ps] = make_uint4(0u, 0u, 0u, 0u);
    if (t < len) r.w[ps] = ldg16(p.v + ((static_cast<long long>(job.start) + a + t) * p.H + job.h) * P + c);
  }
  return r;
}
M3_DEV void store_v_rows(const Smem64& s, const VRows& r) {
#pragma unroll
  for (int ps = 0; ps < kVPasses; ++ps) {
    const int i = threadIdx.x + ps * NT, t = i / (P / 8), c = 8 * (i % (P / 8));
    *reinterpret_cast<uint4*>(s.v() + t * kVStride + c) = r.w[ps];
  }
}
#endif

// KS^T [position of n][s] from KS [s][n]: a warp instruction takes 8 consecutive n by 4
// consecutive s (bank model: conflict-free stores, two-way loads).
M3_DEV void transpose_ks(const Smem64& s) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const float* ks = s.ks();
  float* kst = s.kst();
#pragma unroll 4
  for (int it = 0; it < (N / 8) * (kJob / 4) / NW; ++it) {
    const int b = it * NW + warp;  // block of 8 n by 4 s
    const int n = 8 * (b / (kJob / 4)) + (lane & 7), t = 4 * (b % (kJob / 4)) + (lane >> 3);
    kst[m3wg::sw128_index(N, permuted_column(n), t)] = ks[m3wg::sw128_index(kJob, t, n)];
  }
}

#if M3_CP_F64_LEAN_INDEX >= 2
// The same copy with its addresses worked out once (v135): iteration it of warp w moves n = 8 (it / 2)
// + l7 and t = 32 (it % 2) + 4 w + l3 (l7 = lane % 8, l3 = lane / 8). In KS the 16-byte chunk of
// (t, n) is ((n / 4) % 8) ^ (t % 8) = 2 ((it / 2) % 4) ^ x, with x = (l7 / 4) ^ (t % 8) the same
// in every iteration (the two terms share no bit): four offsets, one per (it / 2) % 4, serve all
// 32 loads. In KS^T the row is 8 (it / 2) + permuted_column(l7) and the chunk w ^ that row % 8,
// so one offset serves all the stores. Each move is then a load and a store at constant offsets.
M3_DEV void transpose_ks_lean(const Smem64& s) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, l7 = lane & 7, l3 = lane >> 3;
  const int x = (l7 >> 2) ^ (4 * (warp & 1) + l3);
  const float* ks = s.ks() + (4 * warp + l3) * 32 + (l7 & 3);
  const float* src[4];
#pragma unroll
  for (int c = 0; c < 4; ++c) src[c] = ks + (((2 * c) ^ x) << 2);
  const int pr = permuted_column(l7);
  float* dst = s.kst() + pr * 32 + ((warp ^ pr) << 2) + l3;
#pragma unroll
  for (int it = 0; it < (N / 8) * (kJob / 4) / NW; ++it) {
    const int m = it >> 1, h = it & 1;
    dst[h * 4096 + 256 * m] = src[m & 3][(m >> 2) * 2048 + h * 1024];
  }
}
#endif

M3_DEV float v_at(const Smem64& s, int t, int p) { return bf2f(s.v()[t * kVStride + p]); }

// x[base + k] for a k in 0..3 known only at run time, by selects.
template <int Size>
M3_DEV float pick4(const float (&x)[Size], int base, int k) {
  return k == 0 ? x[base] : k == 1 ? x[base + 1] : k == 2 ? x[base + 2] : x[base + 3];
}

// Row-major store of this warpgroup's 64 state columns from U's accumulator layout (the state
// rows p = 16 wq + g (+ 8), columns 64 wg + 8 jb + i and + 4). A lane's four words of a block
// are four different row segments: the quad's lanes trade them (a 4 x 4 transpose by shuffles)
// so that lane d stores 16 contiguous bytes, row p (d < 2) or p + 8, columns + 4 (d & 1): 16 full
// sectors a warp instruction instead of 8 half-filled ones per scalar store, a quarter of the
// store instructions.
M3_DEV void store_state_rows(const float (&z)[32], float* out, int wg, int wq, int g, int i) {
  const unsigned quad = (threadIdx.x & 31) & ~3u;
#pragma unroll
  for (int jb = 0; jb < 8; ++jb) {
    float got[4];  // round r's word: lane (i + r) % 4's word i
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      // Round r: this lane exposes its word for lane (i - r) % 4 and takes lane (i + r) % 4's.
      got[r] = __shfl_sync(0xffffffffu, pick4(z, 4 * jb, (i - r) & 3), static_cast<int>(quad) + ((i + r) & 3));
    }
    // Source lane s's word i is row p + 8 (i >> 1), column 64 wg + 8 jb + s + 4 (i & 1); it came in
    // round (s - i) % 4 (selects, not an indexed array: that would live in local memory).
    const int r = 16 * wq + g + 8 * (i >> 1), n = 64 * wg + 8 * jb + 4 * (i & 1);
    *reinterpret_cast<float4*>(out + r * N + n) =
        make_float4(pick4(got, 0, (0 - i) & 3), pick4(got, 0, (1 - i) & 3), pick4(got, 0, (2 - i) & 3),
                    pick4(got, 0, (3 - i) & 3));
  }
}

#if M3_CP_F64_STAGED_STATES
// The same stores through a shared tile (v127): each warp writes its 16 state rows as 8-byte
// pairs (the tile keeps each block of eight columns in KS^T's permuted order, which is the
// accumulator's), reads them back as 32 contiguous bytes of a row (the order undone in registers)
// and stores those. Run 94 found store_state_rows, a quad's four shuffles and two dozen selects on
// run-time indices a block of eight, holding a quarter of the forward's stall samples.
// The tile lies in this warpgroup's rows of KS^T, free once its state products are waited for
// (the other warpgroup's products never read them); a warp's 16 rows (4 KB) are its own, so the
// warp alone synchronises. Chunk c (16 bytes) of row p sits at c ^ (2 (p % 4) + p % 2): the pair
// stores (four rows by 32 bytes a half-warp) and the 16-byte reads (two rows by four blocks a
// quarter-warp) each meet 32 distinct banks.
M3_DEV float* state_stage_row(const Smem64& s, int wg, int p) {
  return s.kst() + 4096 * (p >> 5) + 2048 * wg + 64 * (p & 31);
}
M3_DEV int state_stage_chunk(int p, int c) { return c ^ ((2 * (p & 3)) | (p & 1)); }

// The warp's 16 x 64 block through the tile: put(p, b, x, y) stores row p's columns 64 wg + 8 b ..
// + 7 from the two 16-byte chunks read back (x the block's first, y its second; positions 2 j and
// 2 j + 1 of each hold columns j and j + 4 of the four it covers).
template <typename Put>
M3_DEV void stage_state_block(const float (&z)[32], const Smem64& s, int wg, int wq, int g, int i, Put put) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int p = 16 * wq + g + 8 * hh;
    float* row = state_stage_row(s, wg, p);
#pragma unroll
    for (int jb = 0; jb < 8; ++jb) {
      *reinterpret_cast<float2*>(row + 4 * state_stage_chunk(p, 2 * jb + (i >> 1)) + 2 * (i & 1)) =
          make_float2(z[4 * jb + 2 * hh], z[4 * jb + 2 * hh + 1]);
    }
  }
  __syncwarp();
#pragma unroll
  for (int it = 0; it < 4; ++it) {
    const int p = 16 * wq + 4 * it + 2 * (lane >> 4) + ((lane >> 2) & 1), b = 4 * ((lane >> 3) & 1) + (lane & 3);
    const float* row = state_stage_row(s, wg, p);
    const float4 x = *reinterpret_cast<const float4*>(row + 4 * state_stage_chunk(p, 2 * b));
    const float4 y = *reinterpret_cast<const float4*>(row + 4 * state_stage_chunk(p, 2 * b + 1));
    put(p, b, x, y);
  }
  __syncwarp();  // the rows read before the next state goes over them
}

M3_DEV void store_state_rows_staged(const float (&z)[32], float* out, const Smem64& s, int wg, int wq, int g, int i) {
  stage_state_block(z, s, wg, wq, g, i, [&](int p, int b, float4 x, float4 y) {
    // Positions 2 j and 2 j + 1 of a block hold columns j and j + 4.
    float* dst = out + p * N + 64 * wg + 8 * b;
    *reinterpret_cast<float4*>(dst) = make_float4(x.x, x.z, y.x, y.z);
    *reinterpret_cast<float4*>(dst + 4) = make_float4(x.y, x.w, y.y, y.w);
  });
}
#endif

#if M3_CP_HALF_STATES
// The same rows in half (v252), times a scale of the warp's own: its 16 rows by 64 columns are one
// block of the state, whose inverse scale goes after the halves, to float P N / 2 + 4 wg + wq of
// the slot (the four blocks of a column half side by side, as one backward thread reads them).
M3_DEV void store_state_rows_half(const float (&z)[32], float* out, const Smem64& s, int wg, int wq, int g, int i) {
  const int lane = threadIdx.x & 31;
  float m = 0.f;
#pragma unroll
  for (int x = 0; x < 32; ++x) m = fmaxf(m, fabsf(z[x]));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  float scale, inverse;
  half_block_scale(m, scale, inverse);
  if (lane == 0) out[P * N / 2 + 4 * wg + wq] = inverse;
  unsigned* halves = reinterpret_cast<unsigned*>(out);  // two halves a word, row-major
  stage_state_block(z, s, wg, wq, g, i, [&](int p, int b, float4 x, float4 y) {
    *reinterpret_cast<uint4*>(halves + (p * N + 64 * wg + 8 * b) / 2) =
        make_uint4(f2h_pair(scale * x.x, scale * x.z), f2h_pair(scale * y.x, scale * y.z),
                   f2h_pair(scale * x.y, scale * x.w), f2h_pair(scale * y.y, scale * y.w));
  });
}
#endif

// wgmma's register operand (w v)^T, or v^T without weights, for the four k-steps of tokens
// first .. first + 31: f[k] = rows p0, p0 + 8 at tokens first + 8 k + i and + 4.
M3_DEV void v_fragments(const Smem64& s, const float* w, float (&f)[4][4], int p0, int i, int first) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int s0 = first + 8 * k + i;
    const float w0 = w ? w[s0] : 1.f, w4 = w ? w[s0 + 4] : 1.f;
    f[k][0] = w0 * v_at(s, s0, p0);
    f[k][1] = w0 * v_at(s, s0, p0 + 8);
    f[k][2] = w4 * v_at(s, s0 + 4, p0);
    f[k][3] = w4 * v_at(s, s0 + 4, p0 + 8);
  }
}

// k-step s of a swizzled tile of `rows` rows at `tile` (a shared address). From v133 one add to
// the tile's first descriptor, common to every step (run 95: rebuilt per step from the address,
// about 7% of the forward's instructions).
M3_DEV unsigned long long kstep(unsigned tile, int rows, int s) {
#if M3_CP_F64_LEAN_INDEX >= 1
  return m3wg::sw128_kstep_from(static_cast<unsigned>(m3wg::sw128_descriptor(tile)), rows, s);
#else
  return m3wg::sw128_kstep(tile, rows, s);
#endif
}

M3_DEV void forward64_job(const M3Params& p, const Smem64& s, const Job64& job) {
  const int H = p.H, tid = threadIdx.x;
  const int wg = tid >> 7, wq = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, i = lane & 3;
  const int jobs = (job.len + kJob - 1) / kJob;
  const int a = job.round * kJob, len = min(kJob, job.len - a);
  const bool last = job.round == jobs - 1;
  // Slots (chunk, head) of the job's two chunks of 32, and of the next job's first.
  const long long slot0 = (static_cast<long long>(job.chunk_base) + 2 * job.round) * H + job.h;
  const long long slot1 = slot0 + H, slot2 = slot0 + 2 * H;

  // 1. Scalars, angles, staging.
#if M3_CP_F64_EARLY_LOADS
  // The q and k rows in flight while the scalars and angles are worked out (run 94: stage_qk's
  // first use of them waited on HBM behind the barrier); from level 2 the angles' and v's loads
  // too, which otherwise wait for the scalars' and the angles' arithmetic.
  const QkRows qk_rows = load_qk_rows(p, job, a, len);
#endif
#if M3_CP_F64_EARLY_LOADS >= 2
  const AngleInputs angle_in = load_angle_inputs(p, job, a, len, slot0);
  const VRows v_rows = load_v_rows(p, job, a, len);
  if (tid < 64) token_scalars(p, job, s, tid >> 5, a, len);
  angle_sums_from(s, len, angle_in);
  store_v_rows(s, v_rows);
#else
  if (tid < 64) token_scalars(p, job, s, tid >> 5, a, len);
  angle_sums(p, job, s, a, len, slot0);
  stage_v(p, job, s, a, len);
#endif
  __syncthreads();
#if M3_CP_F64_EARLY_LOADS
  stage_qk(p, job, s, a, len, last, qk_rows);
#else
  stage_qk(p, job, s, a, len, last);
#endif
  __syncthreads();  // QR, KS whole; the angle tile read
#if M3_CP_F64_NEIGHBOUR_PREFETCH
  // Here, once the early loads' registers are free.
  if (job.round == 0) prefetch_job_inputs(p, job, a);
  prefetch_job_inputs(p, job, a + kJob);
#endif
#if M3_CP_F64_LEAN_INDEX >= 2
  transpose_ks_lean(s);
#else
  transpose_ks(s);
#endif
  m3wg::fence_shared_for_async_proxy();
  __syncthreads();

  // 2. The two halves' state contributions (warpgroup wg: state columns 64 wg ..), the chain's
  // only product: the scores wait until after the chain (held across it, their accumulators
  // pushed the job past 128 registers and ptxas serialized every product).
  const unsigned qr_a = s.addr + kQr, r1_a = s.addr + kR1, r2_a = s.addr + kR2;
  const int p0 = 16 * wq + g;
  float u0[32], u1[32];
#pragma unroll
  for (int e = 0; e < 32; ++e) u0[e] = 0.f, u1[e] = 0.f;
  // Each half's register operands are all written before the fence that precedes its products
  // (written between them, ptxas fences every product and serializes them).
  {
    float f[4][4];
    v_fragments(s, s.vec(kWb), f, p0, i, 0);
    m3wg::wgmma_fence();
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      m3wg::wgmma_m64n64k8_tf32_rs(u0, f[k][0], f[k][1], f[k][2], f[k][3], kstep(r2_a + 8192 * wg, N, k));
    }
    v_fragments(s, s.vec(kWb), f, p0, i, 32);
    m3wg::wgmma_fence();
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      m3wg::wgmma_m64n64k8_tf32_rs(u1, f[k][0], f[k][1], f[k][2], f[k][3],
                                   kstep(r2_a + 8192 * wg, N, 4 + k));
    }
  }
  m3wg::wgmma_commit();
  m3wg::wgmma_wait<0>();

  // 3. The chain: Z_j in, Z_mid and Z_end, Z_end out, the flag. Z_j is read again for y below
  // rather than held: with it, U's two accumulators and y's, the job needed 172 registers.
  if (job.round > 0) wait_for(forward_flags(p) + slot0 - H);
  const float4* zin = reinterpret_cast<const float4*>(p.ws_dstates + slot0 * P * N) + (4 * wg + wq) * 8 * 32 + lane;
  const float alpha0 = s.scalars()[kAlpha0], alpha1 = s.scalars()[kAlpha1];
  const bool second = len > C;
#pragma unroll
  for (int jb = 0; jb < 8; ++jb) {
    const float4 w = job.round > 0 ? __ldcg(zin + 32 * jb) : make_float4(0.f, 0.f, 0.f, 0.f);
    const float zj[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int x = 4 * jb + e;
      u0[x] = fmaf(alpha0, zj[e], u0[x]);                   // Z_mid
      u1[x] = second ? fmaf(alpha1, u0[x], u1[x]) : u0[x];  // Z_end
    }
  }
  if (!last) {
    float4* zout = reinterpret_cast<float4*>(p.ws_dstates + slot2 * P * N) + (4 * wg + wq) * 8 * 32 + lane;
#pragma unroll
    for (int jb = 0; jb < 8; ++jb) zout[32 * jb] = make_float4(u1[4 * jb], u1[4 * jb + 1], u1[4 * jb + 2], u1[4 * jb + 3]);
  }
  // The flag sits at the job's second chunk, which the last job of a sequence may not have (its
  // slot can lie past the forward flags, in the backward's): only a job with a successor raises it.
  // Either way the barrier also orders both warpgroups' U before the y tiles go over KS^T.
  if (!last) {
    publish(forward_flags(p) + slot1);
  } else {
    __syncthreads();
  }
#if M3_CP_HALF_STATES
  // The final state is a result, in fp32; the states handed on are half.
  if (last) {
    store_state_rows_staged(u1, p.final_ssm + (static_cast<long long>(job.seq) * H + job.h) * P * N, s, wg, wq, g, i);
  } else {
    store_state_rows_half(u1, p.ws_states + slot2 * P * N, s, wg, wq, g, i);
  }
  if (second) store_state_rows_half(u0, p.ws_states + slot1 * P * N, s, wg, wq, g, i);
#elif M3_CP_F64_STAGED_STATES
  store_state_rows_staged(u1, last ? p.final_ssm + (static_cast<long long>(job.seq) * H + job.h) * P * N
                                   : p.ws_states + slot2 * P * N,
                          s, wg, wq, g, i);
  if (second) store_state_rows_staged(u0, p.ws_states + slot1 * P * N, s, wg, wq, g, i);
#else
  store_state_rows(u1, last ? p.final_ssm + (static_cast<long long>(job.seq) * H + job.h) * P * N
                            : p.ws_states + slot2 * P * N,
                   wg, wq, g, i);
  if (second) store_state_rows(u0, p.ws_states + slot1 * P * N, wg, wq, g, i);
#endif

  // 4. Scores S = QR KS^T, warpgroup wg the keys of half wg, and M = mask * exp(cl_t - cl_s) * S
  // of that half over KS, once both warpgroups' scores have read it.
  {
    float sacc[16];
#pragma unroll
    for (int e = 0; e < 16; ++e) sacc[e] = 0.f;
    m3wg::wgmma_fence();
#pragma unroll
    for (int k = 0; k < N / 8; ++k) {
      m3wg::wgmma_m64n32k8_tf32(sacc, kstep(qr_a, kJob, k), kstep(r1_a + 4096 * wg, kJob, k));
    }
    m3wg::wgmma_commit();
    m3wg::wgmma_wait<0>();
    __syncthreads();
    const float* cl = s.vec(kCl);
#pragma unroll
    for (int jb = 0; jb < 4; ++jb) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int t = 16 * wq + g + 8 * hh, sc = 32 * wg + 8 * jb + 2 * i;
        if ((t >> 5) != wg) continue;  // the other half's rows: never read
        float m2[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int sk = sc + e;
          m2[e] = (sk <= t && t < len) ? m3_decay_expf(cl[t] - cl[sk]) * sacc[4 * jb + 2 * hh + e] : 0.f;
        }
        *reinterpret_cast<float2*>(s.m() + m3wg::sw128_index(kJob, t, sc)) = make_float2(m2[0], m2[1]);
      }
    }
    m3wg::fence_shared_for_async_proxy();
  }

  // 5. y^T over this warpgroup's state columns: the first half's tokens from Z_j, the second's
  // from Z_mid, one after the other (each product's register operand live only until its wait).
  float ya[16], yb[16];
#pragma unroll
  for (int e = 0; e < 16; ++e) ya[e] = 0.f, yb[e] = 0.f;
  {
    float z[32];
#pragma unroll
    for (int jb = 0; jb < 8; ++jb) {
      const float4 w = job.round > 0 ? __ldcg(zin + 32 * jb) : make_float4(0.f, 0.f, 0.f, 0.f);
      z[4 * jb] = w.x, z[4 * jb + 1] = w.y, z[4 * jb + 2] = w.z, z[4 * jb + 3] = w.w;
    }
    m3wg::wgmma_fence();
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      // Tokens 0 .. 31 are QR's first 32 rows.
      m3wg::wgmma_m64n32k8_tf32_rs(ya, z[4 * k], z[4 * k + 2], z[4 * k + 1], z[4 * k + 3],
                                   kstep(qr_a, kJob, 8 * wg + k));
    }
    m3wg::wgmma_commit();
    m3wg::wgmma_wait<0>();
    // The chain's copy of Z_j has been read for the last time (the backward only writes its slot,
    // later): its dirty lines leave L2 without a write-back to HBM, 32 KB a job (v103 does the same
    // with the states its backward has read). A warp read 32 lines of its own; a lane drops one.
    // Not for a sequence's first job: its slot is no copy but the previous sequence's spare one.
    if (job.round > 0) discard_l2_line(zin - lane + 8 * lane);
  }
  m3wg::wgmma_fence();
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    // Tokens 32 .. 63: the 32 rows 4 KB on in every block.
    m3wg::wgmma_m64n32k8_tf32_rs(yb, u0[4 * k], u0[4 * k + 2], u0[4 * k + 1], u0[4 * k + 3],
                                 kstep(qr_a + 4096, kJob, 8 * wg + k));
  }
  m3wg::wgmma_commit();
  m3wg::wgmma_wait<0>();
  {
    const float* ev = s.vec(kE);
#pragma unroll
    for (int jb = 0; jb < 4; ++jb) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int t = 8 * jb + 2 * i + e;
        const float ea = ev[t], eb = ev[32 + t];
        ya[4 * jb + e] *= ea, ya[4 * jb + 2 + e] *= ea;
        yb[4 * jb + e] *= eb, yb[4 * jb + 2 + e] *= eb;
      }
    }
  }
  __syncthreads();  // M whole
  // The intra part of half wg: y^T[:, half] += v^T[:, half] M[half, half]^T.
  // The same instructions in both warpgroups (a branch per warpgroup serializes every product),
  // into an accumulator of its own that then joins its half's.
  {
    float f[4][4], yi[16];
#pragma unroll
    for (int e = 0; e < 16; ++e) yi[e] = 0.f;
    v_fragments(s, nullptr, f, p0, i, 32 * wg);
    m3wg::wgmma_fence();
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      m3wg::wgmma_m64n32k8_tf32_rs(yi, f[k][0], f[k][1], f[k][2], f[k][3],
                                   kstep(r1_a + 4096 * wg, kJob, 4 * wg + k));
    }
    m3wg::wgmma_commit();
    m3wg::wgmma_wait<0>();
#pragma unroll
    for (int e = 0; e < 16; ++e) {
      ya[e] += wg == 0 ? yi[e] : 0.f;
      yb[e] += wg == 0 ? 0.f : yi[e];
    }
  }
  {
    float* y = s.y(wg);
#pragma unroll
    for (int jb = 0; jb < 4; ++jb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int pr = p0 + 8 * (e >> 1), t = 8 * jb + 2 * i + (e & 1);
        y[y_index(t, pr)] = ya[4 * jb + e];
        y[y_index(32 + t, pr)] = yb[4 * jb + e];
      }
    }
  }
  __syncthreads();

  // 6. The epilogue: 8 consecutive p of a token a thread, twice.
  const float* skip = s.vec(kSkip);
#pragma unroll
  for (int it = 0; it < kJob * P / 8 / NT; ++it) {
    const int item = tid + it * NT, t = item >> 3, pc = 8 * (item & 7);
    if (t >= len) continue;
    const long long idx = ((static_cast<long long>(job.start) + a + t) * H + job.h) * P + pc;
    const uint4 zr = ldg16(p.z + idx);
    uint4 dr = make_uint4(0u, 0u, 0u, 0u);
    if (p.dz && p.dout) dr = ldg16(p.dout + idx);
    float y[8], zz[8], dd[8], vv[8];
    {
      // The token's eight lanes read 32-byte pieces of a 256-byte row: lanes 4 .. 7 take their
      // second 16 bytes first, so that each 16-byte load meets 32 distinct banks (else two-way).
      const int h0 = (item >> 2) & 1;
      float y2[8];
#pragma unroll
      for (int part = 0; part < 2; ++part) {
        const int off = 4 * (part ^ h0);
        const float4 a = *reinterpret_cast<const float4*>(s.y(0) + y_index(t, pc) + off);
        const float4 b = *reinterpret_cast<const float4*>(s.y(1) + y_index(t, pc) + off);
        // (part ^ h0) is 0 or 1 at run time: selects keep y and y2 in registers.
        const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (off == 0) {
            y[j] = av[j], y2[j] = bv[j];
          } else {
            y[4 + j] = av[j], y2[4 + j] = bv[j];
          }
        }
      }
      unpack_bf16x8(*reinterpret_cast<const uint4*>(s.v() + t * kVStride + pc), vv);
#pragma unroll
      for (int j = 0; j < 8; ++j) y[j] = y[j] + y2[j] + skip[t] * vv[j];
    }
    unpack_bf16x8(zr, zz);
    unpack_bf16x8(dr, dd);
    unsigned out[4], dz[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float o2[2], d2[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float zv = zz[2 * j + e], yv = y[2 * j + e];
        const float sg = gate_sigmoidf(zv);
        o2[e] = yv * zv * sg;
        d2[e] = dd[2 * j + e] * yv * sg * (1.f + zv * (1.f - sg));
      }
      out[j] = f2bf_pair(o2[0], o2[1]);
      dz[j] = f2bf_pair(d2[0], d2[1]);
    }
    *reinterpret_cast<uint4*>(p.output + idx) = make_uint4(out[0], out[1], out[2], out[3]);
    if (p.dz) *reinterpret_cast<uint4*>(p.dz + idx) = make_uint4(dz[0], dz[1], dz[2], dz[3]);
    if (last && t == len - 1) {
      *reinterpret_cast<uint4*>(p.final_v + (static_cast<long long>(job.seq) * H + job.h) * P + pc) =
          *reinterpret_cast<const uint4*>(s.v() + t * kVStride + pc);
    }
  }
}
}  // namespace m3f64

// Two CTAs an SM: 109 KB of shared memory each, at most 128 registers.
extern "C" __global__ void __launch_bounds__(M3_THREADS, 2) m3_cp_forward64(const M3Params p) {
  using namespace m3f64;
  extern __shared__ float4 smem_raw[];
  __shared__ int job_words[8];
  m3_wait_for_previous_kernel();  // the tickets, the tables and the angle sums m3_cp_angles writes
  const unsigned raw = static_cast<unsigned>(__cvta_generic_to_shared(smem_raw));
  const unsigned pad = (1024u - (raw & 1023u)) & 1023u;
  const Smem64 s{reinterpret_cast<char*>(smem_raw) + pad, raw + pad};
  const Job64 job = take_ticket64(p, job_words);
  if (job.seq < 0) return;
  forward64_job(p, s, job);
}
