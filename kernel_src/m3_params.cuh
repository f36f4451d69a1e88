// The argument block of the operator kernels, and the chunk-scan shared-memory layout. Included by the
// host dispatcher (plain C++) and by NVRTC-compiled kernels, so it holds only plain C types.
#pragma once

typedef unsigned short m3_bf16;  // raw bf16 bits; kernels convert explicitly

struct M3Params {
  // inputs (see SPEC section 1 for shapes)
  const m3_bf16* q;
  const m3_bf16* k;
  const m3_bf16* v;
  const float* adt;
  const float* dt;
  const m3_bf16* trap;
  const float* q_bias;
  const float* k_bias;
  const m3_bf16* angles;
  const float* d;
  const m3_bf16* z;
  const int* cu_seqlens;
  const m3_bf16* dout;  // this and the four final-state cotangents: nullptr means zero
  const m3_bf16* dfinal_angle;
  const float* dfinal_ssm;
  const float* dfinal_k;
  const m3_bf16* dfinal_v;
  // results
  m3_bf16* output;
  m3_bf16* final_angle;
  float* final_ssm;
  float* final_k;
  m3_bf16* final_v;
  m3_bf16* dq;
  m3_bf16* dk;
  m3_bf16* dv;
  float* dadt;
  float* ddt;
  m3_bf16* dtrap;
  float* dq_bias;
  float* dk_bias;
  m3_bf16* dangles;
  float* dd;
  m3_bf16* dz;
  // workspace (v1)
  float* ws_states;   // [total_chunks][H][P][N]: the SSM state entering each chunk
  float* ws_phi;      // [total_chunks][H][A]: the angle sum entering each chunk
  float* ws_dqh;      // [T][H][N]: per-head dq, summed over heads by the reduce kernel
  float* ws_dkh;      // [T][H][N]
  float* ws_partial;  // [partial_rows][H][2N+1]: dq_bias, dk_bias and dd partial sums
  // workspace of the chunk-parallel variant (v10); unused by the walkers
  float* ws_dstates;  // [chunk capacity][H][P][N]: the gradient of the state entering each chunk
  float* ws_tail;     // [chunk capacity][H][m3_tail_words(A)]: the backward carries a chunk hands to the one before
  // 2 ticket counters, then 3 x [chunk capacity][H] ready flags, then (M3_CP_FUSED_HEADS,
  // M3_CP_OVERLAPPED_REDUCE) a heads-done count per chunk; m3_cp_angles zeroes them in every call.
  int* ws_sync;
  int chunk_capacity; // T / chunk + S, at least the number of chunks of any cu_seqlens
  int partial_rows;   // rows of ws_partial that m3_reduce_partials sums
  // initial states and their gradients (variants built with M3_INITIAL_STATES; else unused)
  const m3_bf16* init_angle;  // [S][H][A]
  const float* init_ssm;      // [S][H][P][N]
  const float* init_k;        // [S][H][N]
  const m3_bf16* init_v;      // [S][H][P]
  m3_bf16* d_init_angle;
  float* d_init_ssm;
  float* d_init_k;
  m3_bf16* d_init_v;
  int T;
  int S;
  int H;
  // 1: run the forward walk only (output and final states; the gradients, dz included, and the
  // workspace's dq/dk partials are neither computed nor touched).
  int forward_only;
  // [chunk capacity][2]: the (sequence, round) pair of every ticket's chunk, -1 past the last;
  // written by m3_cp_angles for the variants built with M3_CP_TRIMS, else unused. With
  // M3_CP_RICH_SCHEDULE [chunk capacity][8]: also the sequence's start, length and first chunk.
  int* ws_schedule;
  // Rows per token of ws_dqh and ws_dkh: H, or H / G for the variants whose backward sums dq and
  // dk over clusters of G heads (M3_CP_HEAD_CLUSTERS); read by m3_reduce_heads built with
  // M3_REDUCE_HEAD_PARTS.
  int head_parts;
  // [total_chunks][H][C][C]: the forward's mixing matrix of each chunk and head, which the backward
  // loads instead of rebuilding (M3_CP_STORED_MIXING, v69); null for the other variants.
  float* ws_mixing;
};

// Words of a chunk's backward tail record in ws_tail: A + 4 up to v236, 3 A + 16 for the hand-off
// carries of v237 to v241, 3 A + 40 from v243 (m3_chunk_parallel.cuh, kRec*); the host sizes every
// variant's for the largest.
static constexpr long long m3_tail_words(long long angles) { return 3 * angles + 40; }

// Where the heads-done counts start in ws_sync (ints): after the two ticket counters and the
// forward, backward and tail flags. The backward counts into them and the overlapped reduce
// (M3_REDUCE_CHUNK_READY) waits on them, so both take the offset from here.
static constexpr long long m3_heads_done_offset(long long chunk_capacity, long long heads) {
  return 2 + 3 * chunk_capacity * heads;
}

// Dynamic shared memory of the chunk-64 forward (m3_forward64.cuh checks it against its layout):
// launched by the host, so the number lives here.
enum : int { kM3Forward64SmemBytes = 110144 };
// Likewise for the q side of the chunk-64 backward (m3_backward64q.cuh).
enum : int { kM3Backward64qSmemBytes = 110400 };
// And for its k/v side (m3_backward64kv.cuh).
enum : int { kM3Backward64kvSmemBytes = 208704 };
// And for the whole chunk-64 backward (m3_backward64.cuh).
enum : int { kM3Backward64SmemBytes = 221120 };

// Ints per entry of the M3_CP_RICH_SCHEDULE ticket table: {seq, round, start, 0}, {len,
// chunk_base, 0, 0}, seq = -1 past the last (sequence, round) pair.
enum : int { kM3RichScheduleInts = 8 };

// Chunk-scan shared-memory layout, in floats. Rows are padded by `pad` words: 1 spreads both
// row-wise and column-wise walks of consecutive threads over the banks (CUDA-core tiles); 4 does
// the same for the 8 x 4 access pattern of tensor-core fragments.
struct M3ScanLayout {
  int qr, kr, v, dy, st, ds, m, x, t1, t2, phi, th, dphi, vec, red, total;
};

enum M3ScanVec {
  kVecCl, kVecE, kVecWb, kVecSc, kVecGam, kVecP, kVecDt, kVecQkRaw, kVecRowG, kVecColG,
  kVecU, kVecXs, kVecDyv, kVecDsc, kVecAng, kVecDgam, kVecCount
};

// Single floats after the vectors (16 slots).
enum M3ScanScalar { kScalarPNext, kScalarDtNext };

// Hands out the next `n` floats of a layout being built.
static constexpr int m3_take(int& offset, int n) {
  const int at = offset;
  offset += n;
  return at;
}

// The chunk scan's shared memory, in floats. With `forward_only` (the forward kernel of the
// chunk-parallel variants) the state-gradient, dM, dks and dphi tiles are left out (-1) and t1 is
// only C x P: small enough for two CTAs per SM, about 110 KB at C = 32. With `global_states` (the
// backward of variants that read the states from global memory, M3_CP_GLOBAL_STATES, and the
// forward of M3_CP_FWD_GLOBAL_STATE) neither state tile is there: about 107 KB at C = 32 for the
// backward, two CTAs per SM as well.
// `angle_pad` floats pad each row of the angle tiles (phi, th, dphi; M3_CP_CONFLICT_FREE).
static constexpr M3ScanLayout m3_layout(int C, int N, int P, int A, int threads, int pad, bool forward_only,
                                        bool global_states = false, int angle_pad = 0, bool rows8 = false,
                                        bool rows8_mxt = false) {
  M3ScanLayout l{};
  int o = 0;
  // rows8 (M3_CP_ROWS8): rows N + 8 and P + 8 apart, a skew of at most 8 inside the last 8 floats.
  // rows8_mxt (M3_CP_ROWS8_MXT): the m, x, t1 and t2 tiles likewise (t1 of the forward-only layout
  // keeps its padding: the forward reads it as a plain C x P tile).
  const int rows8_pad = rows8 ? 8 : pad, mxt_pad = rows8_mxt ? 8 : pad;
  l.qr = m3_take(o, C * (N + rows8_pad));
  l.kr = m3_take(o, C * (N + rows8_pad));
  l.v = m3_take(o, C * (P + rows8_pad));
  l.dy = m3_take(o, C * (P + rows8_pad));
  l.st = global_states ? -1 : m3_take(o, P * (N + pad));
  l.ds = forward_only || global_states ? -1 : m3_take(o, P * (N + pad));
  l.m = m3_take(o, C * (C + mxt_pad));
  l.x = forward_only ? -1 : m3_take(o, C * (C + mxt_pad));
  l.t1 = m3_take(o, forward_only ? C * (P + pad) : C * (N + mxt_pad));
  l.t2 = forward_only ? -1 : m3_take(o, C * (N + mxt_pad));
  l.phi = m3_take(o, C * (A + angle_pad));
  l.th = m3_take(o, C * (A + angle_pad));
  l.dphi = forward_only ? -1 : m3_take(o, C * (A + angle_pad));
  l.vec = m3_take(o, C * kVecCount + 2 * A + 16);  // per-token vectors, two angle carries, scalars
  l.red = m3_take(o, threads);
  l.total = o;
  return l;
}
