// Chunk-parallel scan (variant v10): one CTA per (chunk, head) instead of one per (sequence,
// head), running the walkers' chunk code. Only the carries between neighbouring chunks are
// sequential, and they travel through global memory:
//   - m3_cp_angles: the angle sum entering every chunk (chunk totals summed in double along the
//     sequence), the final angle state, and zero final states for empty sequences;
//   - m3_cp_forward: chunk j computes its own contribution U_j to the state before it waits for
//     the state Z_j entering it, publishes Z_{j+1} = alpha_j Z_j + U_j at once, then its outputs;
//   - m3_cp_backward, chunks in reverse: likewise for the state gradient, then every gradient of
//     the chunk; its per-token tail waits a second time, for the reverse-cumsum carries and the
//     one-token shift terms of the chunk after it.
// CTAs take tickets from an atomic counter, in rounds (every sequence's chunk r before any chunk
// r + 1), so a chunk's neighbour in the chain always started before it: waiting on it cannot
// deadlock, even with one CTA per SM. m3_cp_angles zeroes the flags and tickets in every call.
#pragma once

#define M3_NO_SCAN_ENTRY 1
#include "m3_chunk_scan.cuh"
#include "m3_schedule.cuh"

#ifndef M3_CP_LEAN_FORWARD
#define M3_CP_LEAN_FORWARD 0
#endif
#ifndef M3_CP_BATCHED_REORDER
#define M3_CP_BATCHED_REORDER 0
#endif
#ifndef M3_CP_FUSED_HEADS
#define M3_CP_FUSED_HEADS 0
#endif
#ifndef M3_CP_STATE_L2_PREFETCH
#define M3_CP_STATE_L2_PREFETCH 0
#endif
#ifndef M3_CP_NEIGHBOUR_L2_PREFETCH
#define M3_CP_NEIGHBOUR_L2_PREFETCH 0
#endif
// M3_CP_EARLY_BIAS (v61): the backward sums and writes its dq_bias/dk_bias partials right after
// the epilogue, before the tail waits for the successor's carries; only the dd word waits for the
// tail. Run 42 put the bias sums' barrier at the top of the barrier stalls (3.2% of the samples),
// behind the tail, on the job's last stretch before its CTA frees the slot.
#ifndef M3_CP_EARLY_BIAS
#define M3_CP_EARLY_BIAS 0
#endif
#if M3_CP_EARLY_BIAS && !M3_CP_TRIMS2
#error "M3_CP_EARLY_BIAS is wired into the M3_CP_TRIMS2 backward"
#endif
// M3_CP_RICH_SCHEDULE (v63): the ticket table m3_cp_angles writes holds, per chunk, the sequence's
// start, length and first chunk index next to (sequence, round), 32 bytes an entry: a forward job
// reads all of it in thread 0's one round trip, where every thread then read cu_seqlens (and the
// lengths of the sequences before its own) after the ticket's barrier, one more dependent round
// trip before the first staging load could be addressed. The backward keeps reading cu_seqlens:
// with the table its spill stores grew from 76 to 128 bytes (ptxas), more than a round trip in
// a job of about 36 us of slot time is worth.
#ifndef M3_CP_RICH_SCHEDULE
#define M3_CP_RICH_SCHEDULE 0
#endif
#if M3_CP_RICH_SCHEDULE && (!M3_CP_TRIMS || M3_CP_HEAD_CLUSTERS || M3_CP_PERSISTENT == 1)
#error "M3_CP_RICH_SCHEDULE builds on M3_CP_TRIMS's table, without head clusters or v45's persistent CTAs"
#endif
// M3_CP_OVERLAPPED_REDUCE (v101): the reduce kernel is launched programmatically and sums each
// chunk's dq/dk partials as soon as that chunk's H backward CTAs have written them, instead of
// after the whole backward grid (m3_reduce.cuh, M3_REDUCE_CHUNK_READY). The backward lets it
// launch once every backward CTA has started (the start of the last wave: on c01 its tail is about
// 35 us in runs 62 and 70, SMs falling idle one by one, against 45 us of head sums after it), and
// each backward CTA counts its chunk's heads done after the epilogue's stores, through a barrier
// the tail has anyway. Unlike v39's programmatic launches, whose CTAs waited for the whole grid,
// the reduce's CTAs have work as soon as they are resident. Run 74: only c00 gained (-5.5% busy
// span); on c01 the reduce's HBM reads made the backward's tail 36 us longer.
// M3_CP_BACKWARD_TABLE_JOB (v171): the backward takes its sequence's start, length and first chunk
// from the ticket table entry its ticket already read (M3_CP_RICH_SCHEDULE), as the forward does,
// instead of reading cu_seqlens and summing the chunks of the sequences before its own after the
// ticket's barrier: one dependent round trip and a loop fewer before a job's first staging load.
// Run 125 put the job's fixed part (ticket, flags, head count) at 11 to 15% of the backward; v63
// left the backward on cu_seqlens because the table cost it spill stores (76 -> 128 bytes then).
#ifndef M3_CP_BACKWARD_TABLE_JOB
#define M3_CP_BACKWARD_TABLE_JOB 0
#endif
#if M3_CP_BACKWARD_TABLE_JOB && !M3_CP_RICH_SCHEDULE
#error "M3_CP_BACKWARD_TABLE_JOB reads the rich schedule's table"
#endif
// M3_CP_LATE_HEADS_DONE (v249, v250): the count that hands a backward job's dq/dk partials to the
// overlapped reduce is released by warp 1 once the per-token tail is done, while warp 0 finishes
// its own part of it, instead of by thread 0 at the tail's start. Its fence waits for the thread's
// stores to land; at the start of the tail it sat on warp 0's path before the per-token tail that
// every warp waits for (the round trip level 4 of the hand-off carries removed was worth 2.6%).
#ifndef M3_CP_LATE_HEADS_DONE
#define M3_CP_LATE_HEADS_DONE 0
#endif
#ifndef M3_CP_OVERLAPPED_REDUCE
#define M3_CP_OVERLAPPED_REDUCE 0
#endif
#if M3_CP_OVERLAPPED_REDUCE && (!M3_CP_TRIMS2 || !M3_CP_RICH_SCHEDULE || M3_CP_FUSED_HEADS || \
                                M3_CP_HEAD_CLUSTERS || M3_CP_PERSISTENT == 1 || M3_CP_PERSISTENT == 2 || M3_PDL)
#error "M3_CP_OVERLAPPED_REDUCE is wired into the one-job M3_CP_TRIMS2 backward with the rich schedule"
#endif
// M3_CP_DISCARD_DEAD (v103): a backward job drops from L2 the two 32 KB workspace states it has
// read for the last time, the successor's state gradient and the forward's entering state, so that
// their dirty lines are not written back to HBM (the gradients are written and read within one
// job's time: 152 MB of write-backs on c01 that nothing reads).
#ifndef M3_CP_DISCARD_DEAD
#define M3_CP_DISCARD_DEAD 0
#endif
#if M3_CP_DISCARD_DEAD && (!M3_CP_OVERLAPPED_REDUCE || !M3_FRAG_DS || !M3_CP_GLOBAL_STATES)
#error "M3_CP_DISCARD_DEAD is wired into v101's backward, whose gradients all come from the workspace"
#endif
// M3_CP_INLINE_HEAD_SUMS=K (v107): a backward job ends by summing over the heads the dq/dk
// partials of chunk j + K of its sequence, which finished K rounds earlier and whose lines are
// still in L2: its head h takes tokens h, h + H, ... of that chunk, in m3_reduce_heads' order, and
// then drops the summed lines from L2 (no HBM write-back, no HBM read by the reduce: 2 x 152 MB on
// c01). The reduce kernel sums only the first K chunks of each sequence (M3_REDUCE_INLINE_AHEAD).
// Heads are then counted by chunk index, which a job can name for the chunk K ahead.
#ifndef M3_CP_INLINE_HEAD_SUMS
#define M3_CP_INLINE_HEAD_SUMS 0
#endif
#if M3_CP_INLINE_HEAD_SUMS && (!M3_CP_DISCARD_DEAD || !M3_CP_RICH_SCHEDULE)
#error "M3_CP_INLINE_HEAD_SUMS is wired into v103's backward"
#endif
// M3_CP_OVERLAPPED_BACKWARD (v109): the backward is launched programmatically too. The forward
// lets it launch once every forward CTA has started, and a backward job reads its entering state
// only after the forward's flag for it (its first round needs the forward's second-to-last round
// of chunks, not the last one), so the two can run together (run 79: the backward started 11 to
// 21 us before the forward ended on c01-c07 and then ran 4 to 6% longer). Every backward CTA
// ends with griddepcontrol.wait, so that the backward grid, and the reduce behind it, cannot
// complete before the forward has: later work on the stream sees all of the forward's results.
#ifndef M3_CP_OVERLAPPED_BACKWARD
#define M3_CP_OVERLAPPED_BACKWARD 0
#endif
#if M3_CP_OVERLAPPED_BACKWARD && (!M3_CP_DISCARD_DEAD || M3_CP_INLINE_HEAD_SUMS)
#error "M3_CP_OVERLAPPED_BACKWARD is wired into v103's backward"
#endif
// M3_CP_CLUSTER_ANGLES (v81): the angle kernel's CTA of a (sequence, head) becomes a cluster of
// Z CTAs along x (gridDim.x = Z H; the launch picks Z from the longest sequence,
// angle_cluster_size); rank z sums chunks z NW + warp, (z + Z) NW + warp, ..., so a sequence of up
// to Z NW chunks costs one round of loads where a lone CTA needed one per NW chunks (c01: 4
// rounds). After the cluster barrier rank 0 scans, and the last rank writes the ticket table, the
// final-state gradient's reorder and an empty sequence's zero states meanwhile. Same per-chunk
// sums, same scan: results bitwise v79's. Slower (run 56): the kernel is bound by instruction
// issue, not by its rounds of loads (run 57).
#ifndef M3_CP_CLUSTER_ANGLES
#define M3_CP_CLUSTER_ANGLES 0
#endif
#if M3_CP_CLUSTER_ANGLES && !(M3_CP_TRIMS2 && M3_CP_GLOBAL_STATES)
#error "M3_CP_CLUSTER_ANGLES splits the chunk-per-warp loop of M3_CP_TRIMS2 with M3_CP_GLOBAL_STATES"
#endif
// M3_CP_TOKEN_LANE_ANGLES (v83): the angle kernel's chunk totals with a lane per 16-byte quarter of
// a token's angle row (four tokens per lane) instead of a lane per angle index walking the 32
// tokens: 4 vector loads and 4 dt loads per lane where there were 64 scalar loads, each with its
// own 64-bit address arithmetic (run 57: about 12 integer instructions per token next to tanhf's
// 12). The products pass through shared memory so that lane a then sums angle index a over the
// tokens in order with the same fused multiply-adds: results bitwise v79's.
#ifndef M3_CP_TOKEN_LANE_ANGLES
#define M3_CP_TOKEN_LANE_ANGLES 0
#endif
// With M3_CP_CLUSTER_ANGLES as well (v85), the cluster's ranks share out the chunks as in v81;
// slower again (run 60): a finer grid multiplies each CTA's fixed work.
#if M3_CP_TOKEN_LANE_ANGLES && !(M3_CP_TRIMS2 && M3_CP_GLOBAL_STATES)
#error "M3_CP_TOKEN_LANE_ANGLES replaces the chunk-per-warp loop of M3_CP_TRIMS2 with M3_CP_GLOBAL_STATES"
#endif
// M3_CP_LEAN_ANGLES (v158): m3_cp_angles of m3_angles_lean.cuh, the same sums with fewer of its
// round trips in a row (that file says which).
#ifndef M3_CP_LEAN_ANGLES
#define M3_CP_LEAN_ANGLES 0
#endif
#if M3_CP_LEAN_ANGLES && !(M3_CP_TOKEN_LANE_ANGLES && M3_CP_TRIMS && M3_CP_RICH_SCHEDULE && M3_FRAG_DS && \
                           M3_CP_BATCHED_REORDER && !M3_CP_CLUSTER_ANGLES)
#error "M3_CP_LEAN_ANGLES rewrites v83's angle kernel with the rich schedule and the batched reorder, without clusters"
#endif
// Words of the ticket's job in shared memory: seq, round, h, q (and start, len, chunk_base); ints
// per ticket-table entry (the workspace holds 8 for every chunk-parallel variant). Enumerators,
// not constexpr variables: those became device globals and moved every other global's address.
enum : int { kJobWords = M3_CP_RICH_SCHEDULE ? 7 : 4, kScheduleInts = M3_CP_RICH_SCHEDULE ? kM3RichScheduleInts : 2 };
#if M3_CP_FUSED_HEADS && !M3_CP_TRIMS2
#error "M3_CP_FUSED_HEADS is wired into the M3_CP_TRIMS2 backward"
#endif
#if !M3_PARALLEL_SCALARS || !M3_VECTOR_IO || M3_INITIAL_STATES
#error "the chunk-parallel scan builds on M3_PARALLEL_SCALARS and M3_VECTOR_IO, without initial states"
#endif
// M3_PAIRED_STATE_STORES (v13): the states handed from chunk to chunk are written two columns
// per 8-byte store. A warp's scalar stores of a tile fragment touch 8 rows x 4 alternate
// columns, half of every 32-byte sector; paired, it fills whole sectors with half the stores.
#ifndef M3_PAIRED_STATE_STORES
#define M3_PAIRED_STATE_STORES 0
#endif
#if M3_PAIRED_STATE_STORES && !M3_USE_MMA
#error "M3_PAIRED_STATE_STORES needs the tensor-core tiles (their for_each_pair)"
#endif

// M3_CP_FORWARD64 (v119): the forward kernel is m3_cp_forward64 (m3_forward64.cuh), a job of two
// chunks on warpgroup products; the angle kernel also writes its job table.
#ifndef M3_CP_FORWARD64
#define M3_CP_FORWARD64 0
#endif
// M3_CP_F64_STAGED_STATES (v127): the chunk-64 forward writes its row-major states through a
// shared tile instead of a shuffle transpose; M3_CP_F64_EARLY_LOADS: it also issues its q and k
// loads before the scalars and angles (1, v129), and its angles' and v's loads with them (2, v131).
// Each changes only the order of work: results bitwise v119's.
#ifndef M3_CP_F64_STAGED_STATES
#define M3_CP_F64_STAGED_STATES 0
#endif
#ifndef M3_CP_F64_EARLY_LOADS
#define M3_CP_F64_EARLY_LOADS 0
#endif
// M3_CP_F64_LEAN_INDEX: less of its address arithmetic (run 95: the largest share of its executed
// instructions), the same addresses: its wgmma descriptors by one add per k-step (1, v133), and
// KS^T's transpose at offsets worked out once (2, v135). Results bitwise v119's.
#ifndef M3_CP_F64_LEAN_INDEX
#define M3_CP_F64_LEAN_INDEX 0
#endif
// M3_CP_F64_SWAPPED_QK (v156): the q/k staging's lanes with bit 2 of their octet set store the
// octet's high half first. A quarter-warp's eight octets of one token lie in two 128-byte column
// blocks of the swizzled tiles, the same chunks of each: storing every lane's low half first put
// two lanes on each bank, twice the wavefronts (512 excess a job of 64 tokens by
// methods/bank_model/sw128_banks.py; run 96 counted 2.8 M bank conflicts on the forward's shared
// stores on c01, about 1,150 a job). Same values, same places. Run 111: the conflicts went as
// counted and the forward's time did not move.
#ifndef M3_CP_F64_SWAPPED_QK
#define M3_CP_F64_SWAPPED_QK 0
#endif
// M3_CP_F64_NEIGHBOUR_PREFETCH (v225): the chunk-64 forward asks L2 for the inputs of its chain's
// next job (prefetch_job_inputs in m3_forward64.cuh), and in a sequence's first job for its own
// too, whose z and dout rows the epilogue reads last. Run 130 put the waits on the job's input rows
// (the bf16 unpacks of q, k, v, the angles, z and dout) at about 14% of the forward's stall
// samples, and a round of a sequence's jobs starts about two thirds of a job after the round
// before (160 chains on 264 slots on c01). Results bitwise v222's. Run 146: slower (c01's forward
// +4.5%, DRAM reads 82 -> 120 MB): most prefetched lines left L2 before their loads came.
#ifndef M3_CP_F64_NEIGHBOUR_PREFETCH
#define M3_CP_F64_NEIGHBOUR_PREFETCH 0
#endif
// M3_CP_ALIGNED_ENDS (v231): the ticket tables m3_cp_angles writes take m3_schedule_aligned's order
// (every chain's last round aligned with the longest's: the longest chains start first) instead of
// round order. The kernels' times follow ceil(jobs / 264) waves of a job's latency closely (run 146:
// the backward 29 to 33 us a wave, the chunk-64 forward 19 to 21), and with sequences of unequal
// length round order leaves the longest sequence's last rounds with few jobs at the end; a model of
// the chains (methods/results/run147/chains_model.py) puts the aligned order 0 to 4% faster on
// the visible cases' kernels (run 147: the latency geomean -1.6%, every case faster). The same jobs
// in another order: results bitwise v222's.
#ifndef M3_CP_ALIGNED_ENDS
#define M3_CP_ALIGNED_ENDS 0
#endif
#if M3_CP_ALIGNED_ENDS && (!M3_CP_RICH_SCHEDULE || !M3_CP_TRIMS)
#error "M3_CP_ALIGNED_ENDS orders the rich schedule's tables"
#endif
#if M3_CP_ALIGNED_ENDS
#define M3_TICKET_ORDER m3_schedule_aligned
#else
#define M3_TICKET_ORDER m3_schedule
#endif
// M3_CP_GUESSED_TICKET (v229): thread 0 of a forward or backward CTA loads the ticket table's row
// of ticket blockIdx.x (its likely ticket) before its atomic returns, and only loads the row of the
// ticket it drew when that differs. Run 145 put the ticket's barrier at 3.3% of the backward's
// stall samples (run 130: 4.0% of the chunk-64 forward's): 255 threads waiting on thread 0's two
// dependent L2 round trips, the atomic and then its row. The same jobs: results bitwise v225's.
// Run 146: within the bench's noise.
#ifndef M3_CP_GUESSED_TICKET
#define M3_CP_GUESSED_TICKET 0
#endif
#if M3_CP_GUESSED_TICKET && (!M3_CP_RICH_SCHEDULE || M3_CP_PERSISTENT || M3_CP_HEAD_CLUSTERS)
#error "M3_CP_GUESSED_TICKET is wired into the one-job kernels with the rich schedule"
#endif
// M3_CP_HALF_STATES (v252): the chunk-64 forward hands the backward its entering states in IEEE
// half, 16 KB a state instead of 32 (155 MB of c01's 310 MB of state traffic through HBM: run 128
// put the forward's state stores at 40 us of its 208). Each warp's 16 x 64 block carries a power of
// two of its own that puts its largest element in [2^14, 2^15) (the range guard of the planes' core:
// any input scale), whose inverse sits after the halves in the slot's second 16 KB. The backward
// widens them into its fp32 copy of the state as it stages it; everything after is as before. In
// half a state keeps 11 significant bits where the backward's tf32 products used 10 of its fp32 bits
// (truncated); a float64 model of the whole backward with the states so rounded
// (methods/results/half_states/model.txt) moved no gradient's error beyond its noise.
#ifndef M3_CP_HALF_STATES
#define M3_CP_HALF_STATES 0
#endif
#if M3_CP_HALF_STATES && (!M3_CP_FORWARD64 || !M3_CP_F64_STAGED_STATES || !M3_CP_SMEM_STATE || M3_CP_SWIZZLE_FOLD || \
                          M3_CP_PREFETCH || !M3_CP_GLOBAL_STATES)
#error "M3_CP_HALF_STATES is built on v246: the chunk-64 forward's staged state stores and the backward's shared copy"
#endif
// M3_CP_HALF_PARTIALS (v254): the backward's per-head dq and dk rows (ws_dqh, ws_dkh: 152 MB written
// and read back through HBM on c01, the largest workspace traffic after the states) in IEEE half,
// each row of N times a power of two of its own (the 16 lanes that hold it agree on it by four
// shuffles), whose inverse the reduce applies as it sums the heads (M3_REDUCE_HALF_PARTIALS). The
// bias sums keep the fp32 rows. A term's relative rounding is 2^-12 where the bf16 results' is
// 2^-9: the float64 model of the backward moves dq and dk by less than its noise
// (methods/results/half_states/partials.txt).
#ifndef M3_CP_HALF_PARTIALS
#define M3_CP_HALF_PARTIALS 0
#endif
#if M3_CP_HALF_PARTIALS && (!M3_CP_OVERLAPPED_REDUCE || M3_CP_HEAD_CLUSTERS || M3_CP_FUSED_HEADS || \
                            M3_CP_INLINE_HEAD_SUMS || M3_CP_BACKWARD64 || !M3_VECTOR_IO)
#error "M3_CP_HALF_PARTIALS is built on v246's epilogue and its chunk-ready reduce"
#endif
#if (M3_CP_F64_STAGED_STATES || M3_CP_F64_EARLY_LOADS || M3_CP_F64_LEAN_INDEX || M3_CP_F64_SWAPPED_QK || \
     M3_CP_F64_NEIGHBOUR_PREFETCH) && \
    !M3_CP_FORWARD64
#error "the M3_CP_F64_* switches change m3_cp_forward64: build with M3_CP_FORWARD64"
#endif

namespace m3cp {
using namespace m3scan;

#if M3_CP_HANDOFF_CARRIES
// A chunk's tail record (chunk j > 0 writes it for chunk j - 1): cross(G, S) of each half of the
// state's rows and sum G S of each warp (right after the update; from level 3 of each warp and
// lane column t), dc_pending (at the tail's start; level 4 right after backward_intra), this
// chunk's half of the one-token shift at the boundary before it (ddt, dp and p of its first
// token, and at level 1 its dt, with dgamma of the token before from chunk j - 1, which from level
// 2 keeps both in its own registers), and, in the record of a sequence's last chunk only, K.
constexpr int kRecCross = 0;
constexpr int kRecGs = 2 * A;
// Level 3 leaves sum G S summed over a warp's rows only: one word per warp and lane column t.
constexpr int kGsWords = (M3_CP_HANDOFF_CARRIES >= 3 ? 4 : 1) * NW;
constexpr int kRecDcPending = kRecGs + kGsWords;
constexpr int kRecDdtFirst = kRecDcPending + 1, kRecDpFirst = kRecDcPending + 2, kRecPn = kRecDcPending + 3,
              kRecDtn = kRecDcPending + 4, kRecDgl = kRecDcPending + 5;
constexpr int kRecK = kRecDcPending + 8;
constexpr int kTailWords = kRecK + A;
static_assert(kTailWords <= m3_tail_words(A), "the host sizes ws_tail by m3_tail_words");
// Level 2: what every word of a tail record holds until its writer stores it; a NaN payload that
// no float operation produces (theirs is 0x7fffffff), so a NaN result cannot look unwritten.
constexpr unsigned kUnwritten = 0x7fbadbadu;
M3_DEV bool unwritten(float x) { return __float_as_uint(x) == kUnwritten; }
// A record word written once and read by a job of another CTA: relaxed at gpu scope from level 2
// (the word is the signal, no fence orders it); a plain store at level 1, which flags it.
M3_DEV void put_record_word(float* at, float x) {
  if constexpr (M3_CP_HANDOFF_CARRIES >= 2) {
    asm volatile("st.relaxed.gpu.global.f32 [%0], %1;" ::"l"(at), "f"(x) : "memory");
  } else {
    *at = x;
  }
}
M3_DEV float poll_record_word(const float* at) {
  float x;
  asm volatile("ld.relaxed.gpu.global.f32 %0, [%1];" : "=f"(x) : "l"(at));
  return x;
}
// One read of a successor's five carries (the angle sums' two halves, K, sum G S, dc_pending) by
// warp 0, from the shared-memory copy or from L2: true, with the carries taken, once every lane's
// words are written. Both readers evaluate the same sum, so the bits never depend on the path.
M3_DEV bool take_handoff_words(float c0, float c1, float k, float gs_word, float pending_word, float& phi_carry,
                               float& gs, float& pending) {
  phi_carry = (c0 + c1) + k;
  gs = gs_word;
  pending = pending_word;
  return __all_sync(0xffffffffu, !unwritten(c0) && !unwritten(c1) && !unwritten(k) && !unwritten(gs_word) &&
                                     !unwritten(pending_word));
}
#else
constexpr int kTailWords = A + 4;  // Phi carry[A], dadt_run, dc_pending, ddt_first, dp_first
#endif

M3_DEV int seq_chunks(const M3Params& p, int i) { return m3_seq_chunks(p.cu_seqlens, i, C); }

M3_DEV SeqHead seq_head(const M3Params& p, int seq, int h) {
  SeqHead sh;
  sh.h = h;
  sh.seq = seq;
  sh.start = p.cu_seqlens[seq];
  sh.len = p.cu_seqlens[seq + 1] - sh.start;
  if (sh.start < 0 || sh.len < 0 || sh.start + sh.len > p.T) __trap();
  int base = 0;
  for (int i = 0; i < seq; ++i) base += seq_chunks(p, i);
  sh.chunk_base = base;
  return sh;
}

// One ticket per CTA; -1 in job[0] when the ticket is past the last (chunk, head).
struct Job {
  int seq, round, h;
  long long q;
#if M3_CP_RICH_SCHEDULE
  int start, len, chunk_base;  // the sequence's, from the ticket table
#endif
};

// The job's (sequence, head): from the ticket table (M3_CP_RICH_SCHEDULE, kFromTable) or from
// cu_seqlens.
template <bool kFromTable>
M3_DEV SeqHead job_seq_head(const M3Params& p, const Job& job) {
#if M3_CP_RICH_SCHEDULE
  if (kFromTable) return SeqHead{job.h, job.seq, job.start, job.len, job.chunk_base};
#endif
  return seq_head(p, job.seq, job.h);
}

// Thread 0: the job of ticket t into shared[0..3]. Under M3_CP_GUESSED_TICKET the entry of row
// guess_q has been loaded already (guess_first, guess_second): used when the ticket's row is that.
M3_DEV void decode_ticket(const M3Params& p, long long t, int* shared
#if M3_CP_GUESSED_TICKET
                          , long long guess_q = -1, int4 guess_first = {}, int4 guess_second = {}
#endif
) {
  const long long q = t / p.H;
  int seq = -1, round = 0;
#if M3_CP_RICH_SCHEDULE
  int start = 0, len = 0, chunk_base = 0;
  if (q < p.chunk_capacity) {
    // {seq, round, start, -}, {len, chunk_base, -, -}: two loads in one round trip.
#if M3_CP_GUESSED_TICKET
    int4 first = guess_first, second = guess_second;
    if (q != guess_q) {
      const int4* entry = reinterpret_cast<const int4*>(p.ws_schedule + kScheduleInts * q);
      first = entry[0];
      second = entry[1];
    }
#else
    const int4* entry = reinterpret_cast<const int4*>(p.ws_schedule + kScheduleInts * q);
    const int4 first = entry[0], second = entry[1];
#endif
    seq = first.x;
    round = first.y;
    start = first.z;
    len = second.x;
    chunk_base = second.y;
  }
  shared[4] = start;
  shared[5] = len;
  shared[6] = chunk_base;
#elif M3_CP_TRIMS
  // One load from the table m3_cp_angles wrote, instead of the schedule's dependent loads while
  // 255 threads wait.
  if (q < p.chunk_capacity) {
    const int2 pair = *reinterpret_cast<const int2*>(p.ws_schedule + 2 * q);
    seq = pair.x;
    round = pair.y;
  }
#else
  if (!m3_schedule(p.cu_seqlens, p.S, C, q, seq, round)) seq = -1;
#endif
  shared[0] = seq;
  shared[1] = round;
  shared[2] = static_cast<int>(t % p.H);
  shared[3] = static_cast<int>(q);
}

// Asks L2 for the 128-byte line holding `address`; nothing waits for it.
M3_DEV void prefetch_l2(const void* address) { asm volatile("prefetch.global.L2 [%0];" ::"l"(address)); }

#if M3_CP_NEIGHBOUR_L2_PREFETCH
// M3_CP_NEIGHBOUR_L2_PREFETCH (v57): a job asks L2 for the inputs of the next chunk of its chain
// (the forward: j + 1; the backward: j - 1, with the state entering it), whose job starts about
// one job later: its staging loads then hit L2 instead of HBM. Those loads were the forward's
// largest stall (run 33) and about 6% of the backward's samples (run 42). One 128-byte line per
// item: the token rows of v, z, dout and the angles (one line or half a line per token and head),
// the ends of the adt, dt and trap runs, this head's share of the q and k lines (the H heads of a
// chunk split them), and the backward's 256 lines of state. M3_CP_NEIGHBOUR_L2_PREFETCH=2 (v59):
// the forward's only (run 45: v57's forward -1 to -3%, its backward +2 to +5%).
// M3_CP_NEIGHBOUR_L2_PREFETCH=3 (v227): the forward's, and the backward's without the 256 lines of
// state (which v142's copy has in flight from the job's start anyway): on c01 the backward's
// inputs come from HBM, the forward's 155 MB of states having passed through L2 since it read them.
// Run 146: no gain.

M3_DEV void prefetch_chunk_inputs(const M3Params& p, const SeqHead& sh, int jn, const float* state) {
  const int H = p.H, T = p.T;
  const int an = jn * C, lenn = min(C, sh.len - an);
  const long long t0 = sh.start + an;
  constexpr int kRows = 4 * C, kRuns = 6, kStateLines = P * N / 32;
  const int qk_lines = 4 * lenn;  // q and k rows: two lines per token each (N bf16 = 256 bytes)
  const int qk_share = (qk_lines - sh.h + H - 1) / H;  // lines h, h + H, ...: this head's
  const int total = kRows + kRuns + qk_share + (state ? kStateLines : 0);
  for (int i = M3_TID(); i < total; i += NT) {
    if (i < kRows) {
      const int which = i / C, t = i % C;
      if (t >= lenn) continue;
      const long long row = (t0 + t) * H + sh.h;
      if (which == 0) prefetch_l2(p.v + row * P);
      if (which == 1) prefetch_l2(p.z + row * P);
      if (which == 2 && p.dout) prefetch_l2(p.dout + row * P);
      if (which == 3) prefetch_l2(p.angles + row * A);
    } else if (i < kRows + kRuns) {
      const int r = i - kRows;
      const long long e = static_cast<long long>(sh.h) * T + t0 + ((r & 1) ? lenn - 1 : 0);
      if (r < 2) prefetch_l2(p.adt + e);
      else if (r < 4) prefetch_l2(p.dt + e);
      else prefetch_l2(p.trap + e);
    } else if (i < kRows + kRuns + qk_share) {
      const int line = sh.h + H * (i - kRows - kRuns);  // 0 .. 4 lenn - 1
      const int t = line >> 2, half = line & 1;
      const m3_bf16* rows = (line & 2) ? p.k : p.q;
      prefetch_l2(rows + (t0 + t) * N + half * (N / 2));
    } else {
      prefetch_l2(state + (i - kRows - kRuns - qk_share) * 32);
    }
  }
}
#endif

#if M3_CP_NEIGHBOUR_L2_PREFETCH == 3
// The same lines as prefetch_chunk_inputs without the state, at most one prefetch a thread and no
// loop (the loop added 272 instructions and three spill loads to the backward): a line of v, z,
// dout or the angles per thread of warps 0 to 3 (lane = token), four of the q and k lines (h,
// h + H, ...: with H = 32 this head's share) by warp 4, and the ends of the adt, dt and trap runs
// (32 fp32 or bf16 span at most two lines) by warp 5.
M3_DEV void prefetch_chunk_inputs_lean(const M3Params& p, const SeqHead& sh, int jn) {
  static_assert(NT >= 6 * 32 && C == 32, "a warp per input, a lane per token");
  const int tid = M3_TID(), H = p.H, t = tid & 31, which = tid >> 5;
  const int an = jn * C, lenn = min(C, sh.len - an);
  const long long t0 = sh.start + an;
  if (which < 4) {
    if (t >= lenn) return;
    const long long row = (t0 + t) * H + sh.h;
    if (which == 0) prefetch_l2(p.v + row * P);
    if (which == 1) prefetch_l2(p.z + row * P);
    if (which == 2 && p.dout) prefetch_l2(p.dout + row * P);
    if (which == 3) prefetch_l2(p.angles + row * A);
  } else if (which == 4) {
    const int line = sh.h + H * t, tq = line >> 2;
    if (t < 4 && line < 4 * C && tq < lenn) prefetch_l2(((line & 2) ? p.k : p.q) + (t0 + tq) * N + (line & 1) * (N / 2));
  } else if (which == 5 && t < 6) {
    const long long e = static_cast<long long>(sh.h) * p.T + t0 + ((t & 1) ? lenn - 1 : 0);
    if (t < 2) prefetch_l2(p.adt + e);
    else if (t < 4) prefetch_l2(p.dt + e);
    else prefetch_l2(p.trap + e);
  }
}
#endif

// Row q of a ticket table (kScheduleInts words a row) when the caller says it is in the table, else
// {-1, ...} (no job).
M3_DEV void ticket_row(const int* table, long long q, bool in_table, int4& first, int4& second) {
  first = make_int4(-1, 0, 0, 0);
  second = make_int4(0, 0, 0, 0);
  if (in_table) {
    const int4* entry = reinterpret_cast<const int4*>(table + kScheduleInts * q);
    first = entry[0];
    second = entry[1];
  }
}

M3_DEV Job take_ticket(const M3Params& p, int* counter, int* shared) {
#if M3_CP_GUESSED_TICKET
  if (M3_TID() == 0) {
    // CTAs draw their tickets about in launch order, so the row of ticket blockIdx.x is loaded
    // while the atomic travels: right, the job is known one L2 round trip sooner.
    const long long guess_q = blockIdx.x / p.H;
    int4 first, second;
    ticket_row(p.ws_schedule, guess_q, guess_q >= 0 && guess_q < p.chunk_capacity, first, second);
    decode_ticket(p, atomicAdd(counter, 1), shared, guess_q, first, second);
  }
#else
  if (M3_TID() == 0) decode_ticket(p, atomicAdd(counter, 1), shared);
#endif
  __syncthreads();
#if M3_CP_RICH_SCHEDULE
  Job job{shared[0], shared[1], shared[2], shared[3], shared[4], shared[5], shared[6]};
#else
  Job job{shared[0], shared[1], shared[2], shared[3]};
#endif
#if !M3_CP_TRIMS2
  __syncthreads();  // (nothing writes `shared` again: each CTA takes one ticket)
#endif
  return job;
}

// Tickets past the last chunk cover the rows of the backward's partials no chunk writes, one each.
M3_DEV void zero_partials_row(const M3Params& p, const Job& job) {
  if (job.q < p.chunk_capacity) {
    float* part = p.ws_partial + (job.q * p.H + job.h) * (2 * N + 1);
    for (int c = M3_TID(); c < 2 * N + 1; c += NT) part[c] = 0.f;
  }
}

// This CTA's rank in its cluster and the cluster's size (1 and 0 without a cluster launch), and
// the cluster barrier: arrive releases this thread's writes, wait acquires every other's.
M3_DEV unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
M3_DEV unsigned cluster_ranks() {
  unsigned n;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
  return n;
}
M3_DEV void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
M3_DEV void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

#if M3_CP_HEAD_CLUSTERS
#if !M3_CP_TRIMS2 || !M3_CP_GLOBAL_STATES || M3_CP_FUSED_HEADS
#error "M3_CP_HEAD_CLUSTERS is wired into the M3_CP_TRIMS2, M3_CP_GLOBAL_STATES backward without fused head sums"
#endif
// A backward cluster is G CTAs (the launch's cluster size, G dividing H): the heads g G .. g G +
// G - 1 of one chunk, rank r taking head g G + r. Its rank 0 draws one ticket for the group; the
// tickets t = ticket G + r are the ones a CTA per job would draw, in the same order, so a chunk's
// successor still started first. Three cluster barriers per job: the ticket, the dq/dk rows
// ready, and the reads done (a CTA's shared memory must outlive its peers' reads of it).
// The address of the same shared word in the CTA of cluster rank `rank`.
M3_DEV unsigned peer_address(const void* local, unsigned rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote)
               : "r"(static_cast<unsigned>(__cvta_generic_to_shared(local))), "r"(rank));
  return remote;
}
M3_DEV float4 load_peer_f4(unsigned address) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(address)
               : "memory");
  return v;
}
M3_DEV int load_peer_s32(unsigned address) {
  int v;
  asm volatile("ld.shared::cluster.s32 %0, [%1];" : "=r"(v) : "r"(address) : "memory");
  return v;
}

// The cluster's job: rank 0 draws the group ticket into its own shared[4]; after the first
// barrier every rank reads it from there. Ends with the cluster barrier's arrive that says the
// ticket was read; the job's next cluster_wait completes it.
M3_DEV Job take_cluster_ticket(const M3Params& p, int* counter, int* shared) {
  const unsigned rank = cluster_rank(), ranks = cluster_ranks();
  if (M3_TID() == 0 && rank == 0) shared[4] = atomicAdd(counter, 1);
  cluster_arrive();
  cluster_wait();
  if (M3_TID() == 0) {
    const long long group = load_peer_s32(peer_address(shared + 4, 0));
    decode_ticket(p, group * ranks + rank, shared);
  }
  cluster_arrive();
  __syncthreads();
  return Job{shared[0], shared[1], shared[2], shared[3]};
}

// dq and dk of the chunk's tokens summed over the cluster's heads, in rank order, into the
// partials row of head group h / G ([T][H / G][N]); rank r sums the r-th G-th of the rows. The
// rows wait in every rank's t2 (dq) and kr (dk) tiles, rows padded to LDN.
M3_DEV void sum_cluster_heads(const M3Params& p, Smem& s, int h, long long token0, int len) {
  const unsigned rank = cluster_rank(), ranks = cluster_ranks();
  constexpr int QUADS = N / 4, SLOTS = 2 * C * QUADS;
  const int per = SLOTS / static_cast<int>(ranks), parts = p.H / static_cast<int>(ranks);
  const int part = h / static_cast<int>(ranks);
  for (int e = static_cast<int>(rank) * per + M3_TID(); e < static_cast<int>(rank + 1) * per; e += NT) {
    const int tile = e / (C * QUADS), t = (e / QUADS) % C, quad = e % QUADS;
    if (t >= len) continue;
    const float* local = (tile == 0 ? s.t2 : s.kr) + t * LDN + 4 * quad;
    float4 acc = load_peer_f4(peer_address(local, 0));
    for (unsigned r = 1; r < ranks; ++r) {
      const float4 x = load_peer_f4(peer_address(local, r));
      acc.x += x.x, acc.y += x.y, acc.z += x.z, acc.w += x.w;
    }
    float* dst = (tile == 0 ? p.ws_dqh : p.ws_dkh) + ((token0 + t) * parts + part) * N + 4 * quad;
    *reinterpret_cast<float4*>(dst) = acc;
  }
}
#endif  // M3_CP_HEAD_CLUSTERS

#ifndef M3_CP_PERSISTENT
#define M3_CP_PERSISTENT 0
#endif
#if M3_CP_PERSISTENT && M3_CP_HEAD_CLUSTERS
#error "M3_CP_HEAD_CLUSTERS draws one ticket per cluster and job: not with persistent CTAs"
#endif
#if M3_CP_PERSISTENT && !(M3_CP_TRIMS2 && M3_CP_GLOBAL_STATES)
#error "M3_CP_PERSISTENT builds on the job bodies of M3_CP_TRIMS2 and M3_CP_GLOBAL_STATES"
#endif
// M3_CP_PERSISTENT (v45): the forward and backward grids hold only the CTAs that fit on the device
// at once, and each CTA runs job after job. Thread 0 draws the next ticket as a job starts, so
// the atomic's round trip (and a new CTA's launch) is hidden behind the job, where a CTA per job
// spent them before its first load. Still no deadlock: the smallest unfinished ticket is always
// some CTA's current job (a CTA holding a drawn, unstarted ticket is busy with a smaller one),
// and its predecessor in the chain has a smaller ticket still, so it finished. The backward also
// runs the tickets past the last chunk up to chunk_capacity: they zero the unused partial rows.
// The host launches min(jobs, resident CTAs) of each (LoadedKernel::resident_ctas).
M3_DEV int persistent_first_ticket(int* counter) { return M3_TID() == 0 ? atomicAdd(counter, 1) : 0; }

// The head of a persistent CTA's job loop: the job of ticket `next` into `job` for every thread,
// then thread 0 draws the ticket after it. False once the tickets are used up (the forward: past
// the last chunk; the backward, zero_partials: past chunk_capacity). Its first barrier also ends
// the previous job, so that nothing of it still reads shared memory.
M3_DEV bool persistent_next_job(const M3Params& p, int* counter, int* shared, bool zero_partials, int& next,
                                Job& job) {
  if (M3_TID() == 0) decode_ticket(p, next, shared);
  __syncthreads();
#if M3_CP_RICH_SCHEDULE
  job = Job{shared[0], shared[1], shared[2], shared[3], shared[4], shared[5], shared[6]};
#else
  job = Job{shared[0], shared[1], shared[2], shared[3]};
#endif
  __syncthreads();  // every thread holds the job before thread 0 may write the next one
  if (job.seq < 0 && (!zero_partials || job.q >= p.chunk_capacity)) return false;
#if M3_CP_PERSISTENT == 1
  if (M3_TID() == 0) next = atomicAdd(counter, 1);  // travels while this job runs
#endif
  return true;
}

// M3_CP_PERSISTENT=2 (v97): v45's persistent CTAs, but a job draws the ticket of the CTA's next
// job late, a few microseconds before it ends (the forward: before its outputs; the backward:
// before the tail's wait), instead of as it starts. v45's early draw hid the atomic and the CTA
// launch but held each drawn ticket a whole job before it ran, and the chains of chunks waited on
// those tickets (run 41: backward +2 to +6%). Drawn late, the atomic's round trip still travels
// behind the rest of the job, and a ticket waits only that long. The deadlock argument above holds
// unchanged: a CTA holding a drawn ticket is busy with a smaller one. M3_CP_PERSISTENT=3 (v99):
// the forward's CTAs only; the backward keeps a CTA per job (its loop's live values cost it
// spill loads: 74 -> 87 LDL in v97's SASS). Both measured slower than v95 on the larger cases
// (run 68: backward +2 to +5%, v99's forward +0.5 to +2%).
#define M3_CP_PERSISTENT_FORWARD (M3_CP_PERSISTENT != 0)
#define M3_CP_PERSISTENT_BACKWARD (M3_CP_PERSISTENT == 1 || M3_CP_PERSISTENT == 2)
#if M3_CP_PERSISTENT >= 2
M3_DEV void draw_ticket(int* counter, int& next) {
  if (M3_TID() == 0) next = atomicAdd(counter, 1);
}
#define M3_LATE_TICKET_PARAM , int *counter, int &next
#define M3_LATE_TICKET_ARGS , p.ws_sync, next
#else
#define M3_LATE_TICKET_PARAM
#define M3_LATE_TICKET_ARGS
#endif

// Data before flag: every thread's writes are made visible device-wide, then one thread raises
// the flag with release semantics.
M3_DEV void publish(int* flag) {
#if M3_CP_TRIMS
  // The barrier orders every thread's writes before thread 0's release store, whose fence is
  // cumulative (the pattern of a grid-wide barrier): one fence instead of 256.
  __syncthreads();
  if (M3_TID() == 0) asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(flag), "r"(1) : "memory");
#else
  __threadfence();
  __syncthreads();
  if (M3_TID() == 0) asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(flag), "r"(1) : "memory");
#endif
}

// The angle sum entering chunk `slot` into phi_carry. Under M3_CP_TRIMS by the last A threads
// and without a barrier of its own: load_chunk's first barrier comes before its first use, and
// the load travels with load_chunk's first loads.
M3_DEV void load_phi_carry(const M3Params& p, Smem& s, long long slot) {
#if M3_CP_TRIMS
  const int i = static_cast<int>(M3_TID()) - (NT - A);
  if (i >= 0) s.phi_carry()[i] = p.ws_phi[slot * A + i];
#else
  if (M3_TID() < A) s.phi_carry()[M3_TID()] = p.ws_phi[slot * A + M3_TID()];
  __syncthreads();
#endif
}

// Flag before data: one thread waits with acquire semantics; the barrier holds the others back.
// The data behind the flag is then read with ld.global.cg (L2), never from a stale L1 line.
M3_DEV void spin_acquire(const int* flag) {
  int ready = 0;
  for (;;) {
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(ready) : "l"(flag) : "memory");
    if (ready) break;
    __nanosleep(64);
  }
}

M3_DEV void wait_for(const int* flag) {
  if (M3_TID() == 0) spin_acquire(flag);
  __syncthreads();
}

M3_DEV void zero_state(float* dst) {
  for (int e = M3_TID(); e < P * N; e += NT) dst[(e / N) * LDN + (e % N)] = 0.f;
}

#if M3_CP_BULK_STATE
// The mbarrier that counts the entering state's bytes in (M3_CP_BULK_STATE): one use per CTA, so
// phase 0 is the only one waited for. The job's barriers before the wait publish the init.
M3_DEV void init_state_barrier(unsigned long long* bar) {
  if (M3_TID() == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(bar)))
                 : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
}

// After wait_for: the predecessor's generic stores, acquired by thread 0 and shared by the barrier,
// are ordered before the async proxy's reads by the proxy fence. Warp 0 arms the barrier with the
// tile's bytes and issues a bulk copy per row (rows of LDN floats in shared, N in the workspace);
// every thread then waits for the bytes.
M3_DEV void bulk_stage_state(const float* src, float* dst, unsigned long long* bar) {
  const unsigned b = static_cast<unsigned>(__cvta_generic_to_shared(bar));
  if (M3_TID() < 32) {
    asm volatile("fence.proxy.async.global;" ::: "memory");
    if (M3_TID() == 0) {
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(P * N * 4) : "memory");
    }
    __syncwarp();
    for (int r = M3_TID(); r < P; r += 32) {
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                       smem_address(dst + r * LDN)),
                   "l"(src + r * N), "r"(N * 4), "r"(b)
                   : "memory");
    }
  }
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(b)
      : "memory");
}
#endif

M3_DEV int* forward_flags(const M3Params& p) { return p.ws_sync + 2; }
M3_DEV int* backward_flags(const M3Params& p) {
  return p.ws_sync + 2 + static_cast<long long>(p.chunk_capacity) * p.H;
}
M3_DEV int* tail_flags(const M3Params& p) {
  return p.ws_sync + 2 + 2 * static_cast<long long>(p.chunk_capacity) * p.H;
}

// Per chunk, how many of its H backward CTAs have written their dq/dk partials: by chunk index
// (M3_CP_FUSED_HEADS), or by the ticket table's entry (M3_CP_OVERLAPPED_REDUCE).
M3_DEV int* heads_done(const M3Params& p) { return p.ws_sync + m3_heads_done_offset(p.chunk_capacity, p.H); }

// M3_CP_FUSED_HEADS (v49): the last of a chunk's H backward CTAs to finish sums the chunk's dq/dk
// partials over the heads while they are still in L2, in m3_reduce_heads' order (the same bits),
// and m3_reduce_heads is not launched: its 152 MB read from HBM on c01 (43 us) becomes an L2 read
// of 1 MB by one CTA per chunk. Writers: the barrier, then thread 0's fence (cumulative over the
// barrier, as in publish) before the count; the last CTA fences after it and reads through L2.
M3_DEV void reduce_heads_of_chunk(const M3Params& p, long long chunk, long long token0, int len) {
  __shared__ int is_last;
  __syncthreads();
  if (M3_TID() == 0) {
    __threadfence();
    is_last = atomicAdd(heads_done(p) + chunk, 1) == p.H - 1;
    __threadfence();
  }
  __syncthreads();
  if (!is_last) return;
  constexpr int QUADS = N / 4;
  const long long row = static_cast<long long>(p.H) * N;
  for (int i = M3_TID(); i < len * QUADS; i += NT) {
    const long long t = token0 + i / QUADS;
    const int n = 4 * (i % QUADS);
    sum_heads_x4<QUADS>(reinterpret_cast<const float4*>(p.ws_dqh + t * row + n),
                        reinterpret_cast<const float4*>(p.ws_dkh + t * row + n), p.H, p.dq + t * N + n,
                        p.dk + t * N + n);
  }
}

#if M3_CP_INLINE_HEAD_SUMS
// The head sums of chunk j + M3_CP_INLINE_HEAD_SUMS of this job's sequence: this head's share of
// its tokens, once its H CTAs have counted in. Everything comes from the ticket's words in shared
// memory, so nothing stays live in registers through the job for it. Then its lines leave L2.
M3_DEV void sum_heads_ahead(const M3Params& p, const int* job_words) {
  static_assert(NT == 2 * N, "a thread per column of dq and of dk");
  const int round = job_words[1], h = job_words[2], start = job_words[4], len = job_words[5];
  const int chunks = (len + C - 1) / C;
  const int target = m3_backward_chunk(len, C, round) + M3_CP_INLINE_HEAD_SUMS;
  if (target >= chunks) return;  // the reduce kernel sums the sequence's first chunks
  const int tokens = min(C, len - target * C);
  if (h >= tokens) return;  // more heads than tokens: nothing for this one
  const int H = p.H;
  if (M3_TID() == 0) m3_wait_for_count<128>(heads_done(p) + job_words[6] + target, H);
  __syncthreads();
  const int c = M3_TID() % N;
  const bool is_k = M3_TID() >= N;
  const float* rows = is_k ? p.ws_dkh : p.ws_dqh;
  m3_bf16* out = is_k ? p.dk : p.dq;
  const long long first = start + static_cast<long long>(target) * C;
  for (int t = h; t < tokens; t += H) {
    const float* row = rows + (first + t) * H * N + c;
    float acc = 0.f;  // m3_reduce_heads' order: 0 + head 0 + head 1 + ...
#pragma unroll 8
    for (int hh = 0; hh < H; ++hh) acc += __ldcg(row + hh * N);
    out[(first + t) * N + c] = f2bf(acc);
  }
  __syncthreads();  // every column read
  const int lines = H * N / 32;  // 128-byte lines of one token's partials, per tensor
  for (int t = h; t < tokens; t += H) {
    for (int i = M3_TID(); i < 2 * lines; i += NT) {
      discard_l2_line((i < lines ? p.ws_dqh : p.ws_dkh) + (first + t) * H * N + 32 * (i % lines));
    }
  }
}
#endif

M3_DEV double wrap_angle_double(double x) {
  const double two_pi = 6.283185307179586476925286766559;
  return x - two_pi * floor(x / two_pi);
}

}  // namespace m3cp

#if M3_CP_LEAN_ANGLES
#include "m3_angles_lean.cuh"
#else
// The angle sum entering every chunk of one (sequence, head) into ws_phi, the final angle state,
// and zero final states for an empty sequence. Grid (H, S).
#if M3_CP_TOKEN_LANE_ANGLES && M3_CP_CLUSTER_ANGLES
// Five CTAs an SM (48 registers; shared memory allows five): c01's 640 CTAs in one wave.
extern "C" __global__ void __launch_bounds__(M3_THREADS, 5)
#else
extern "C" __global__ void __launch_bounds__(M3_THREADS)
#endif
    m3_cp_angles(const M3Params p) {
  using namespace m3cp;
  m3_allow_next_kernel();
#if M3_CP_CLUSTER_ANGLES
  // Clusters of zs CTAs along x: rank z of head h is CTA h zs + z.
  const int zs = static_cast<int>(cluster_ranks()), z = static_cast<int>(cluster_rank());
  const int h = blockIdx.x / zs, seq = blockIdx.y, H = p.H, T = p.T;
#else
  const int h = blockIdx.x, seq = blockIdx.y, H = p.H, T = p.T;
#endif
  const int warp = M3_TID() >> 5, lane = M3_TID() & 31;
  {
    // The two kernels after this one start from zeroed tickets and ready flags (everything up to
    // the last tail flag): zeroed here, in the kernel that precedes them on the stream, they cost
    // the host no memset.
    const long long words = (tail_flags(p) - p.ws_sync) + static_cast<long long>(p.chunk_capacity) * H +
                            (M3_CP_FUSED_HEADS || M3_CP_OVERLAPPED_REDUCE ? p.chunk_capacity : 0);  // heads_done
    const long long first = (static_cast<long long>(blockIdx.y) * gridDim.x + blockIdx.x) * blockDim.x + M3_TID();
    const long long stride = static_cast<long long>(gridDim.x) * gridDim.y * blockDim.x;
    for (long long i = first; i < words; i += stride) p.ws_sync[i] = 0;
#if M3_CP_HANDOFF_CARRIES >= 2
    const long long tail_words = static_cast<long long>(p.chunk_capacity) * H * kTailWords;
    for (long long i = first; i < tail_words; i += stride) p.ws_tail[i] = __uint_as_float(kUnwritten);
#endif
  }
  const SeqHead sh = seq_head(p, seq, h);
  const int chunks = (sh.len + C - 1) / C;
  const long long row = static_cast<long long>(seq) * H + h;
  static_assert(A == 32, "one lane per angle index");
  // Chunk totals of theta * dt, with the chunk code's own fp32 products, a warp per chunk; all of
  // a chunk's loads are issued before the first use, so each chunk costs one memory round trip.
#if M3_CP_TRIMS2
  // Two chunks per warp at a time: twice the loads in flight, half the round trips. That took 161
  // registers, one CTA per SM and two waves of them on five sequences (run 25: 29.9 us against
  // 21.6 on c01); from v23 on (M3_CP_GLOBAL_STATES) one chunk again.
#if M3_CP_TOKEN_LANE_ANGLES
  static_assert(C == 32 && A == 32, "a warp's lanes cover a chunk's 32 tokens as 8 x 4 row quarters");
  __shared__ __align__(16) float products[NW][C][A + 4];  // 16-byte rows, conflict-free quarters
  __shared__ float token_dt[NW][C];
  const int quarter = lane & 3;
  const long long token_stride = static_cast<long long>(H) * A;
#if M3_CP_CLUSTER_ANGLES
  for (int j = z * NW + warp; j < chunks; j += zs * NW) {
#else
  for (int j = warp; j < chunks; j += NW) {
#endif
    const int a = j * C, len = min(C, sh.len - a);
    const m3_bf16* rows = p.angles + (static_cast<long long>(sh.start + a) * H + h) * A + 8 * quarter;
    const float* dts = p.dt + static_cast<long long>(h) * T + sh.start + a;
    uint4 raw[4];
    float dt4[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int t = 8 * i + (lane >> 2);
      raw[i] = t < len ? *reinterpret_cast<const uint4*>(rows + t * token_stride) : make_uint4(0u, 0u, 0u, 0u);
      dt4[i] = t < len ? dts[t] : 0.f;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int t = 8 * i + (lane >> 2);
      const unsigned w[4] = {raw[i].x, raw[i].y, raw[i].z, raw[i].w};
      float y[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        // Element e of the quarter: the low half of word e / 2 first (little-endian bf16 pairs).
        const unsigned bits = (e & 1) ? (w[e >> 1] & 0xffff0000u) : (w[e >> 1] << 16);
        y[e] = kM3Pi * m3_tanhf(__uint_as_float(bits));
      }
      float4* dst = reinterpret_cast<float4*>(&products[warp][t][8 * quarter]);
      dst[0] = make_float4(y[0], y[1], y[2], y[3]);
      dst[1] = make_float4(y[4], y[5], y[6], y[7]);
      if (quarter == 0) token_dt[warp][t] = dt4[i];
    }
    __syncwarp();
    float total = 0.f;
#pragma unroll
    for (int t = 0; t < C; ++t) total = fmaf(products[warp][t][lane], token_dt[warp][t], total);
    p.ws_phi[(static_cast<long long>(sh.chunk_base + j) * H + h) * A + lane] = total;
    __syncwarp();  // every lane has read the products before the next chunk's overwrite them
  }
#else
  constexpr int kBatch = M3_CP_GLOBAL_STATES ? 1 : 2;
#if M3_CP_CLUSTER_ANGLES
  for (int j0 = z * NW + warp; j0 < chunks; j0 += zs * NW) {  // kBatch is 1
#else
  for (int j0 = warp; j0 < chunks; j0 += kBatch * NW) {
#endif
    m3_bf16 raw[kBatch][C];
    float dts[kBatch][C];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int a = (j0 + b * NW) * C, len = min(C, sh.len - a);
#pragma unroll
      for (int t = 0; t < C; ++t) {
        const int tg = sh.start + a + t;
        raw[b][t] = t < len ? p.angles[(static_cast<long long>(tg) * H + h) * A + lane] : static_cast<m3_bf16>(0);
        dts[b][t] = t < len ? p.dt[h * T + tg] : 0.f;
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int j = j0 + b * NW;
      float total = 0.f;
#pragma unroll
      for (int t = 0; t < C; ++t) total += (kM3Pi * m3_tanhf(bf2f(raw[b][t]))) * dts[b][t];
      if (j < chunks) p.ws_phi[(static_cast<long long>(sh.chunk_base + j) * H + h) * A + lane] = total;
    }
  }
#endif  // M3_CP_TOKEN_LANE_ANGLES
#else
  for (int j = warp; j < chunks; j += NW) {
    const int a = j * C, len = min(C, sh.len - a);
    m3_bf16 raw[C];
    float dts[C];
#pragma unroll
    for (int t = 0; t < C; ++t) {
      const int tg = sh.start + a + t;
      raw[t] = t < len ? p.angles[(static_cast<long long>(tg) * H + h) * A + lane] : static_cast<m3_bf16>(0);
      dts[t] = t < len ? p.dt[h * T + tg] : 0.f;
    }
    float total = 0.f;
#pragma unroll
    for (int t = 0; t < C; ++t) total += (kM3Pi * m3_tanhf(bf2f(raw[t]))) * dts[t];
    p.ws_phi[(static_cast<long long>(sh.chunk_base + j) * H + h) * A + lane] = total;
  }
#endif
#if M3_CP_CLUSTER_ANGLES
  // Every rank's chunk totals are in ws_phi: rank 0 scans them (loads that skip L1, which has not
  // seen the other ranks' stores), the last rank does the rest.
  cluster_arrive();
  cluster_wait();
  const bool scans = z == 0, finishes = z == zs - 1;
#define M3_ANGLE_TOTAL(ptr) __ldcg(ptr)
#else
  __syncthreads();
  constexpr bool scans = true, finishes = true;
  (void)scans;  // the scan without M3_CP_TRIMS2 tests its warp instead
#define M3_ANGLE_TOTAL(ptr) (*(ptr))
#endif
#if M3_CP_TRIMS2
  if (scans) {
    // The sums entering the chunks by warp scans in double, 32 chunks per pass, the angle indices
    // spread over the warps and scanned together: a pass costs one round trip where the walk
    // below costs one per eight chunks. Each sum is wrapped once: in double the unwrapped sum
    // (a few 10^4 rad at most) keeps far more bits than the fp32 result shows.
    constexpr int K = A / NW;
    static_assert(K * NW == A, "angle indices must split evenly over the warps");
    const long long stride = static_cast<long long>(H) * A;
    float* slots = p.ws_phi + (static_cast<long long>(sh.chunk_base) * H + h) * A;
    double carry[K];
#pragma unroll
    for (int u = 0; u < K; ++u) carry[u] = 0.0;
    for (int j0 = 0; j0 < chunks; j0 += 32) {
      const int j = j0 + lane;
      double x[K];
#pragma unroll
      for (int u = 0; u < K; ++u) x[u] = j < chunks ? static_cast<double>(M3_ANGLE_TOTAL(slots + j * stride + warp + u * NW)) : 0.0;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        double y[K];
#pragma unroll
        for (int u = 0; u < K; ++u) y[u] = __shfl_up_sync(0xffffffffu, x[u], o);
#pragma unroll
        for (int u = 0; u < K; ++u) {
          if (lane >= o) x[u] += y[u];
        }
      }
#pragma unroll
      for (int u = 0; u < K; ++u) {
        const double before = __shfl_up_sync(0xffffffffu, x[u], 1);
        const double entering = carry[u] + (lane == 0 ? 0.0 : before);
        if (j < chunks) slots[j * stride + warp + u * NW] = static_cast<float>(wrap_angle_double(entering));
        carry[u] += __shfl_sync(0xffffffffu, x[u], 31);
      }
    }
#pragma unroll
    for (int u = 0; u < K; ++u) {
      if (lane == 0) {
        const float fin = static_cast<float>(wrap_angle_double(carry[u]));
        p.final_angle[row * A + warp + u * NW] = f2bf(chunks > 0 ? fin : 0.f);
      }
    }
  }
#else
  if (warp == 0) {
    // Along the sequence in double, wrapped once per chunk: no fp32 drift however long it is.
    // Eight chunk totals are loaded before any of their slots is overwritten, so that the loads
    // of a group travel together.
    double sum = 0.0;
    float* slots = p.ws_phi + (static_cast<long long>(sh.chunk_base) * H + h) * A + lane;
    const long long stride = static_cast<long long>(H) * A;
    for (int j0 = 0; j0 < chunks; j0 += 8) {
      float total[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) total[u] = j0 + u < chunks ? slots[(j0 + u) * stride] : 0.f;
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        if (j0 + u < chunks) {
          slots[(j0 + u) * stride] = static_cast<float>(wrap_angle_double(sum));
          sum = wrap_angle_double(sum + static_cast<double>(total[u]));
        }
      }
    }
    p.final_angle[row * A + lane] = f2bf(chunks > 0 ? static_cast<float>(sum) : 0.f);
  }
#endif
#undef M3_ANGLE_TOTAL
#if M3_CP_TRIMS
  if (h == 0 && seq == 0 && finishes) {
    for (int q = M3_TID(); q < p.chunk_capacity; q += NT) {
      int s = -1, round = 0;
      if (!M3_TICKET_ORDER(p.cu_seqlens, p.S, C, q, s, round)) s = -1;
#if M3_CP_RICH_SCHEDULE
      // {seq, round, start, unused}, {len, chunk_base, unused, unused}
      const SeqHead sh_q = s >= 0 ? seq_head(p, s, 0) : SeqHead{0, -1, 0, 0, 0};
      int4* entry = reinterpret_cast<int4*>(p.ws_schedule + kScheduleInts * q);
      entry[0] = make_int4(s, round, sh_q.start, 0);
      entry[1] = make_int4(sh_q.len, sh_q.chunk_base, 0, 0);
#if M3_CP_FORWARD64
      // The chunk-64 forward's jobs (two chunks each) in the same round order, in a second table
      // after this one: {seq, round of 64 tokens, start, unused}, {len, chunk_base (chunks of C)}.
      int s64 = -1, round64 = 0;
      if (!M3_TICKET_ORDER(p.cu_seqlens, p.S, 2 * C, q, s64, round64)) s64 = -1;
      const SeqHead sh64 = s64 >= 0 ? seq_head(p, s64, 0) : SeqHead{0, -1, 0, 0, 0};
      int4* entry64 = reinterpret_cast<int4*>(p.ws_schedule + kScheduleInts * (p.chunk_capacity + q));
      entry64[0] = make_int4(s64, round64, sh64.start, 0);
      entry64[1] = make_int4(sh64.len, sh64.chunk_base, 0, 0);
#endif
#else
      p.ws_schedule[2 * q] = s;
      p.ws_schedule[2 * q + 1] = round;
#endif
    }
  }
#endif
#if M3_FRAG_DS
  // The backward reads the final state's gradient, like every state gradient, in fragment order
  // from the slot after the sequence's last chunk (the workspace has one slot to spare for it).
  if (finishes && chunks > 0 && p.dfinal_ssm && !p.forward_only) {
    const float* src = p.dfinal_ssm + row * P * N;
    const long long spare = static_cast<long long>(sh.chunk_base + chunks) * H + h;
    float4* dst = reinterpret_cast<float4*>(p.ws_dstates + spare * P * N);
#if M3_CP_BATCHED_REORDER
    // Every load of a thread before its first store (v45): the compiler must assume the stores may
    // alias the loads, so the loop below waits one round trip per word, eight in a row. (Both
    // loops spell the word out: through a shared helper v27-v43's angle kernel compiled
    // differently.)
    constexpr int kWords = P * N / 4 / NT;
    static_assert(kWords * NT == P * N / 4, "the words split evenly over the threads");
    float4 w[kWords];
#pragma unroll
    for (int u = 0; u < kWords; ++u) {
      const int q = M3_TID() + u * NT;
      const int r = q / (N / 4), pos = 4 * (q % (N / 4));
      const float* in = src + r * N + (pos & ~31) + frag_col((pos & 31) >> 2);  // columns frag_col(w) + 8 i
      w[u] = make_float4(in[0], in[8], in[16], in[24]);
    }
#pragma unroll
    for (int u = 0; u < kWords; ++u) dst[M3_TID() + u * NT] = w[u];
#else
    for (int q = M3_TID(); q < P * N / 4; q += NT) {
      const int r = q / (N / 4), pos = 4 * (q % (N / 4));
      const float* in = src + r * N + (pos & ~31) + frag_col((pos & 31) >> 2);  // columns frag_col(w) + 8 i
      dst[q] = make_float4(in[0], in[8], in[16], in[24]);
    }
#endif
  }
#endif
  if (finishes && sh.len == 0) {
    for (int e = M3_TID(); e < P * N; e += NT) p.final_ssm[row * P * N + e] = 0.f;
    for (int e = M3_TID(); e < N; e += NT) p.final_k[row * N + e] = 0.f;
    for (int e = M3_TID(); e < P; e += NT) p.final_v[row * P + e] = static_cast<m3_bf16>(0);
  }
}

#endif  // M3_CP_LEAN_ANGLES

namespace m3cp {
// One forward (chunk, head) job.
M3_DEV void forward_job(const M3Params& p, Smem& s, const Job& job M3_LATE_TICKET_PARAM) {
  const int H = p.H, tid = M3_TID(), j = job.round;
  const SeqHead sh = job_seq_head<M3_CP_RICH_SCHEDULE != 0>(p, job);
  const int chunks = (sh.len + C - 1) / C;
  const int a = j * C, len = min(C, sh.len - a);
  const long long g = sh.chunk_base + j;
  const long long slot = g * H + sh.h;
  const bool last = j == chunks - 1;
#if M3_CP_BULK_STATE
  __shared__ unsigned long long state_barrier;
  init_state_barrier(&state_barrier);
#endif
#if M3_CP_NEIGHBOUR_L2_PREFETCH
  if (!last) prefetch_chunk_inputs(p, sh, j + 1, nullptr);
#endif

#if M3_CP_PREFETCH
  // The entering state arrives only after the wait: its tile holds the raw rows until then.
  prefetch_chunk(p, sh, s, s.st, a, len, p.dz != nullptr, nullptr);
#endif
  load_phi_carry(p, s, slot);
  forward_prepare(p, sh, s, a, len);
#if M3_CP_STORED_MIXING
  // forward_prepare's closing barrier published s.m. (Null in a forward-only call.)
  if (p.ws_mixing) store_mixing(s, p.ws_mixing + slot * C * C);
#endif
  StateTile upd;
  chunk_state_contribution(s, upd);

  // The state entering the chunk, then at once the state leaving it (the next chunk waits for it).
#if M3_CP_FWD_GLOBAL_STATE
  if (j > 0) wait_for(forward_flags(p) + slot - H);
  s.gst = j == 0 ? nullptr : p.ws_states + slot * P * N;
  {
    const float alpha = s.vv(kVecE)[len - 1];
    float* out = last ? p.final_ssm + (static_cast<long long>(sh.seq) * H + sh.h) * P * N
                      : p.ws_states + (slot + H) * P * N;
#if M3_CP_FWD_GLOBAL_STATE == 2
    // Row-major states (v115): a thread's columns n0 + 8 jj + 2 t + e of a row as four 8-byte
    // loads, and as many stores, for the next chunk and for the final state alike.
    upd.for_each_row([&](int i, int h, int r) {
      float2 st[4];
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const int c = upd.n0 + 8 * jj + 2 * upd.t;
        st[jj] = s.gst ? __ldcg(reinterpret_cast<const float2*>(s.gst + r * N + c)) : make_float2(0.f, 0.f);
      }
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        *reinterpret_cast<float2*>(out + r * N + upd.n0 + 8 * jj + 2 * upd.t) =
            make_float2(alpha * st[jj].x + upd.acc[i][jj][2 * h], alpha * st[jj].y + upd.acc[i][jj][2 * h + 1]);
      }
    });
#else
    // The entering state's words are the accumulators' own (fragment order): two 16-byte loads per
    // row, and as many stores; the final state goes out row-major.
    upd.for_each_row([&](int i, int h, int r) {
      float v[2][4];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float4 st = s.st4_published(r, upd.n0 + 4 * frag_word(2 * upd.t + e));
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) v[e][jj] = alpha * quad_at(st, jj) + upd.acc[i][jj][2 * h + e];
      }
      if (!last) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          *reinterpret_cast<float4*>(out + r * N + upd.n0 + 4 * frag_word(2 * upd.t + e)) =
              make_float4(v[e][0], v[e][1], v[e][2], v[e][3]);
        }
      } else {
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
          *reinterpret_cast<float2*>(out + r * N + upd.n0 + 8 * jj + 2 * upd.t) = make_float2(v[0][jj], v[1][jj]);
        }
      }
    });
#endif  // M3_CP_FWD_GLOBAL_STATE == 2
  }
#else
  if (j == 0) {
    zero_state(s.st);
  } else {
    wait_for(forward_flags(p) + slot - H);
#if M3_CP_FRAG_STATES
    stage_state_frag(p.ws_states + slot * P * N, s.st);
#elif M3_CP_BULK_STATE
    bulk_stage_state(p.ws_states + slot * P * N, s.st, &state_barrier);
#else
    stage_state<true>(p.ws_states + slot * P * N, s.st);
#endif
  }
  __syncthreads();
  const float alpha = s.vv(kVecE)[len - 1];
  float* out = last ? p.final_ssm + (static_cast<long long>(sh.seq) * H + sh.h) * P * N
                    : p.ws_states + (slot + H) * P * N;
#if M3_PAIRED_STATE_STORES
  const auto store_row_major = [&] {
    upd.for_each_pair([&](int r, int c, float acc0, float acc1) {
      const float2 st = *reinterpret_cast<const float2*>(s.st + r * LDN + c);
      *reinterpret_cast<float2*>(out + r * N + c) = make_float2(alpha * st.x + acc0, alpha * st.y + acc1);
    });
  };
#endif
#if M3_CP_FRAG_STATES
  if (!last) {
    // In fragment order: a thread's eight columns of a row (8 j + 2 t + e, j = 0..3, e = 0..1)
    // are two 16-byte words. The final state goes out row-major, below.
    upd.for_each_row([&](int i, int h, int r) {
      float v[2][4];
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const float2 st = *reinterpret_cast<const float2*>(s.st + r * LDN + upd.n0 + 8 * jj + 2 * upd.t);
        v[0][jj] = alpha * st.x + upd.acc[i][jj][2 * h];
        v[1][jj] = alpha * st.y + upd.acc[i][jj][2 * h + 1];
      }
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        *reinterpret_cast<float4*>(out + r * N + upd.n0 + 4 * frag_word(2 * upd.t + e)) =
            make_float4(v[e][0], v[e][1], v[e][2], v[e][3]);
      }
    });
  } else {
    store_row_major();
  }
#elif M3_PAIRED_STATE_STORES
  store_row_major();
#else
  upd.for_each([&](int r, int c, float acc) { out[r * N + c] = alpha * s.st[r * LDN + c] + acc; });
#endif
#endif  // M3_CP_FWD_GLOBAL_STATE
  if (!last) publish(forward_flags(p) + slot);

#if M3_CP_PERSISTENT >= 2
  draw_ticket(counter, next);
#endif
  forward_outputs(p, sh, s, a, len);
  if (last) {
    const long long row = static_cast<long long>(sh.seq) * H + sh.h;
    if (tid < N) p.final_k[row * N + tid] = s.kr[M3_QK_AT(len - 1, tid)];
    if (tid < P) p.final_v[row * P + tid] = p.v[(static_cast<long long>(sh.start + sh.len - 1) * H + sh.h) * P + tid];
  }
}
}  // namespace m3cp

// M3_CP_LEAN_FORWARD (v11): the forward's own smaller layout and at most 128 registers, two
// CTAs per SM; three at 80 registers with M3_CP_FORWARD_MIN_CTAS=3 (v113).
extern "C" __global__ void __launch_bounds__(M3_THREADS, M3_CP_LEAN_FORWARD ? M3_CP_FORWARD_MIN_CTAS : 1)
    m3_cp_forward(const M3Params p) {
  using namespace m3cp;
  extern __shared__ float4 smem_raw[];
  __shared__ int job_words[kJobWords];
#if M3_CP_LEAN_FORWARD
  Smem s = carve_forward(reinterpret_cast<float*>(smem_raw));
#else
  Smem s = carve(reinterpret_cast<float*>(smem_raw));
#endif
  m3_wait_for_previous_kernel();  // the tickets and flags m3_cp_angles zeroes, the angle sums
  m3_allow_next_kernel<M3_CP_OVERLAPPED_BACKWARD != 0>();  // v109: its backward
#if M3_CP_PERSISTENT_FORWARD
  int next = persistent_first_ticket(p.ws_sync);
  Job job;
  while (persistent_next_job(p, p.ws_sync, job_words, /*zero_partials=*/false, next, job)) {
    forward_job(p, s, job M3_LATE_TICKET_ARGS);
  }
#else
  const Job job = take_ticket(p, p.ws_sync, job_words);
  if (job.seq < 0) return;
  forward_job(p, s, job);
#endif
}

#if M3_CP_HANDOFF_CARRIES
namespace m3cp {
// Right after a chunk's update publishes G, the gradient of the state S entering the chunk (the
// update's accumulators; S in s.t1, where the update read it): each row half's cross(G, S) and
// each warp's sum G S to the chunk's tail record, straight from registers, for the job of the
// chunk before (M3_CP_HANDOFF_CARRIES). A pair (2 i, 2 i + 1) of columns sits in one thread, as
// accumulator entries 2 h and 2 h + 1 of n-tile jj; the warps of the first 2 A columns hold the
// angle pairs, a warp's lanes of one t the same pairs on eight rows.
M3_DEV void write_handoff_partials(const M3Params& p, const Smem& s, const StateTile& upd, long long slot) {
  static_assert(M3_FRAG_DS && M3_CP_SMEM_STATE && !M3_CP_SWIZZLE_FOLD && !M3_FRAG_ST,
                "reads S where and as the update reads it");
  static_assert(StateTile::WN == 32 && StateTile::NTL == 4 && (2 * A) % StateTile::WN == 0 && P / StateTile::WM == 2,
                "whole warps of angle columns, two row halves");
  float* rec = p.ws_tail + slot * kTailWords;
  const int lane = M3_TID() & 31;
  float gs = 0.f, cross[StateTile::NTL] = {};
#pragma unroll
  for (int i = 0; i < StateTile::MT; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = upd.m0 + i * 16 + upd.g + (h << 3);
#pragma unroll
      for (int jj = 0; jj < StateTile::NTL; ++jj) {
        const float2 st = *reinterpret_cast<const float2*>(s.t1 + M3_SS(r, upd.n0 + 8 * jj + 2 * upd.t));
        const float g0 = upd.acc[i][jj][2 * h], g1 = upd.acc[i][jj][2 * h + 1];
        gs = fmaf(g0, st.x, gs);
        gs = fmaf(g1, st.y, gs);
        cross[jj] = fmaf(g0, st.y, cross[jj]);
        cross[jj] = fmaf(-g1, st.x, cross[jj]);
      }
    }
  gs = warp_sum(gs);
  if (lane == 0) put_record_word(&rec[kRecGs + (M3_TID() >> 5)], gs);
  // Every warp shuffles (outside any branch, so that no divergent-path copy is compiled); the
  // warps of the angle columns store.
#pragma unroll
  for (int jj = 0; jj < StateTile::NTL; ++jj)
#pragma unroll
    for (int o = 4; o < 32; o <<= 1) cross[jj] += __shfl_xor_sync(0xffffffffu, cross[jj], o);
  if (upd.n0 < 2 * A && upd.g == 0) {
#pragma unroll
    for (int jj = 0; jj < StateTile::NTL; ++jj)
      put_record_word(&rec[kRecCross + (upd.m0 / StateTile::WM) * A + upd.n0 / 2 + 4 * jj + upd.t], cross[jj]);
  }
}

// A chunk's dc_pending word, its dc terms that fall on the token before it: -da less the sum of u
// over its tokens. Warp 0, a lane per token.
M3_DEV float dc_pending_word(Smem& s, int lane, int len, float da) {
  static_assert(C == 32, "a lane per token");
  return -da - warp_sum(lane < len ? s.vv(kVecU)[lane] : 0.f);
}

// K, in the record of a sequence's last chunk (rec): the sum of dphi over the chunk's tokens (the
// scan's carry) less cross(G, S) of the state entering it, which the consumer adds back. Warp 0,
// a lane per angle.
M3_DEV float sequence_k_word(Smem& s, const float* rec, int lane) {
  return s.big_phi_carry()[lane] - (__ldcg(rec + kRecCross + lane) + __ldcg(rec + kRecCross + A + lane));
}

// One side of the chunk boundary before token tg, the first of the chunk whose record is `rec`:
// after its half of the one-token shift is in the record, it counts itself in on the boundary's
// tail flag (2 a side, over the 1 of the record's early words); the second side to arrive writes
// the token's ddt and dtrap from the record alone, so the bits do not depend on which side it is.
// Thread 0 of a job.
M3_DEV void meet_at_boundary(const M3Params& p, int h, const float* rec, int* flag, int tg) {
  int before;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 2;" : "=r"(before) : "l"(flag) : "memory");
  if (before < 2) return;
  const float ddt_first = __ldcg(rec + kRecDdtFirst), dp_first = __ldcg(rec + kRecDpFirst);
  const float pn = __ldcg(rec + kRecPn), dtn = __ldcg(rec + kRecDtn), dgl = __ldcg(rec + kRecDgl);
  p.ddt[h * p.T + tg] = ddt_first + dgl * (1.f - pn);
  p.dtrap[h * p.T + tg] = f2bf((dp_first - dgl * dtn) * pn * (1.f - pn));
}

// Level 3: the sums the update loop formed in registers, reduced over the eight lanes of one
// column t: sum G S by a butterfly (lanes g = 0 store a word per warp and t), the four angle sums
// of a thread (its n-tiles jj) by a transposed butterfly, four shuffles instead of twelve, after
// which lane (g, t) holds n-tile 2 (g >> 2) + ((g >> 1) & 1) summed over the eight rows' lanes.
M3_DEV void write_handoff_sums(const M3Params& p, const StateTile& upd, long long slot, float gs,
                               const float (&cross)[StateTile::NTL]) {
  static_assert(StateTile::NTL == 4 && StateTile::WN == 32 && (2 * A) % StateTile::WN == 0 && P / StateTile::WM == 2,
                "four n-tiles a thread, whole warps of angle columns, two row halves");
  float* rec = p.ws_tail + slot * kTailWords;
  const int lane = M3_TID() & 31;
#pragma unroll
  for (int o = 4; o < 32; o <<= 1) gs += __shfl_xor_sync(0xffffffffu, gs, o);
  if (upd.g == 0) put_record_word(&rec[kRecGs + 4 * (M3_TID() >> 5) + upd.t], gs);
  const bool hi16 = lane & 16, hi8 = lane & 8;
  float k0 = hi16 ? cross[2] : cross[0], k1 = hi16 ? cross[3] : cross[1];
  k0 += __shfl_xor_sync(0xffffffffu, hi16 ? cross[0] : cross[2], 16);
  k1 += __shfl_xor_sync(0xffffffffu, hi16 ? cross[1] : cross[3], 16);
  float k = hi8 ? k1 : k0;
  k += __shfl_xor_sync(0xffffffffu, hi8 ? k0 : k1, 8);
  k += __shfl_xor_sync(0xffffffffu, k, 4);
  if (upd.n0 < 2 * A && (lane & 4) == 0) {
    const int jj = (hi16 ? 2 : 0) + (hi8 ? 1 : 0);
    put_record_word(&rec[kRecCross + (upd.m0 / StateTile::WM) * A + upd.n0 / 2 + 4 * jj + upd.t], k);
  }
}

#if M3_CP_HANDOFF_CARRIES == 4
// Level 4's copies of the successor's record (cross, sum G S and dc_pending: its first 100 words)
// and of the sequence's K into red, after m3_cp_backward's da words: 16-byte cp.async by warp 0,
// waited for at the start of the tail. A copy may catch a word before its writer stores it; the
// tail checks every word and polls L2 if one is unwritten.
constexpr int kHandoffDaWords = 64;  // m3_cp_backward's kDaWords
constexpr int kHandoffCopy = kHandoffDaWords + NW + (4 - (L.red + kHandoffDaWords + NW) % 4) % 4;
constexpr int kCopyK = kRecDcPending + 4;
static_assert(kRecDcPending % 4 == 0 && kRecK % 4 == 0 && kTailWords % 4 == 0 && kHandoffCopy + kCopyK + A <= NT,
              "16-byte pieces of the record, within red");
M3_DEV void copy_handoff_words(const M3Params& p, Smem& s, long long next_slot, long long last_slot) {
  const int lane = M3_TID() & 31;
  const float* rec = p.ws_tail + next_slot * kTailWords;
  const float* k_vec = p.ws_tail + last_slot * kTailWords + kRecK;
  float* cp = s.red + kHandoffCopy;
  constexpr int kRecPieces = kCopyK / 4, kPieces = kRecPieces + A / 4;
#pragma unroll
  for (int q = lane; q < kPieces; q += 32) {
    if (q < kRecPieces) {
      cp_async16(cp + 4 * q, rec + 4 * q);
    } else {
      cp_async16(cp + kCopyK + 4 * (q - kRecPieces), k_vec + 4 * (q - kRecPieces));
    }
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
}
#endif
}  // namespace m3cp
#endif

// M3_CP_GLOBAL_STATES: 107 KB of shared memory, and at most 128 registers (which the kernel
// needs without spilling): two CTAs per SM.
extern "C" __global__ void __launch_bounds__(M3_THREADS, M3_CP_GLOBAL_STATES ? 2 : 1)
    m3_cp_backward(const M3Params p) {
  using namespace m3cp;
  extern __shared__ float4 smem_raw[];
  __shared__ int job_words[M3_CP_HEAD_CLUSTERS ? 5 : kJobWords];  // [4]: the cluster's ticket
  Smem s = carve(reinterpret_cast<float*>(smem_raw));
  m3_wait_for_previous_kernel();  // the states the forward hands on, and everything before it
  m3_allow_next_kernel<M3_CP_OVERLAPPED_REDUCE != 0>();  // v101: its reduce
#if M3_CP_PERSISTENT_BACKWARD
  // The body below stays the text (and so the SASS) of the variants before v45, which run it once;
  // a device function of its own changed their register allocation.
  int next = persistent_first_ticket(p.ws_sync + 1);
  Job job;
  while (persistent_next_job(p, p.ws_sync + 1, job_words, /*zero_partials=*/true, next, job)) {
    if (job.seq < 0) {
      zero_partials_row(p, job);
#if M3_CP_PERSISTENT == 2
      draw_ticket(p.ws_sync + 1, next);
#endif
      continue;
    }
    const int H = p.H, tid = M3_TID();
#elif M3_CP_HEAD_CLUSTERS
  // The ranks of a cluster share a chunk, so all of them leave here or none.
  const Job job = take_cluster_ticket(p, p.ws_sync + 1, job_words);
  const int H = p.H, tid = M3_TID();
  if (job.seq < 0) {
    zero_partials_row(p, job);
    cluster_wait();
    return;
  }
#else
  const Job job = take_ticket(p, p.ws_sync + 1, job_words);
  const int H = p.H, tid = M3_TID();
  if (job.seq < 0) {
    zero_partials_row(p, job);
#if M3_CP_OVERLAPPED_BACKWARD
    m3_wait_for_previous_kernel<true>();  // not done before the forward is
#endif
    return;
  }
#endif
  const SeqHead sh = job_seq_head<M3_CP_BACKWARD_TABLE_JOB != 0>(p, job);
  const int chunks = (sh.len + C - 1) / C;
  const int j = chunks - 1 - job.round;
  const int a = j * C, len = min(C, sh.len - a);
  const long long g = sh.chunk_base + j;
  const long long slot = g * H + sh.h;
  const bool last = j == chunks - 1;
#if M3_CP_STATE_L2_PREFETCH
  // The entering state (the forward's, 32 KB) is first read by the state-gradient update, after
  // the chunk's staging and the wait for the successor; waits on those reads were about a tenth
  // of the backward's stall samples in run 42. On c01 the forward's states (155 MB) exceed L2
  // (60 MB), so most come from HBM: every thread asks L2 for one 128-byte line of it now (a bulk
  // prefetch by one thread cost the kernel 16 bytes more of stack).
  if (j > 0 && !M3_CP_SMEM_STATE) {  // v142 copies it into shared memory at once instead
    static_assert(P * N * sizeof(float) == NT * 128, "one 128-byte line per thread");
    prefetch_l2(p.ws_states + slot * P * N + tid * 32);
  }
#endif
#if M3_CP_NEIGHBOUR_L2_PREFETCH
  // Chunk j - 1 reads the state entering it unless it is the sequence's first.
  if (M3_CP_NEIGHBOUR_L2_PREFETCH == 1 && j > 0) {
    prefetch_chunk_inputs(p, sh, j - 1, j > 1 ? p.ws_states + (slot - H) * P * N : nullptr);
  }
#if M3_CP_NEIGHBOUR_L2_PREFETCH == 3
  if (j > 0) prefetch_chunk_inputs_lean(p, sh, j - 1);
#endif
#endif

#if M3_CP_PREFETCH
  // The state gradient arrives only after the wait: its tile holds the raw rows until then.
  prefetch_chunk(p, sh, s, s.ds, a, len, true, j == 0 ? nullptr : p.ws_states + slot * P * N);
#endif
  backward_prepare(p, sh, s, static_cast<int>(g), a, len, j == 0 ? nullptr : p.ws_states + slot * P * N);
  StateTile upd;
  state_grad_contribution(s, upd);

  // The gradient of the state leaving the chunk, then at once that of the state entering it.
#if M3_CP_GLOBAL_STATES
  s.gst = j == 0 ? nullptr : p.ws_states + slot * P * N;
#if M3_CP_OVERLAPPED_BACKWARD
  if (j > 0) wait_for(forward_flags(p) + slot - H);  // the forward may still be running
#endif
  if (last) {
#if M3_FRAG_DS
    // m3_cp_angles left the final state's gradient there, in fragment order.
    s.gds = p.dfinal_ssm ? p.ws_dstates + (slot + H) * P * N : no_dstate();
#else
    s.gds = p.dfinal_ssm ? p.dfinal_ssm + (static_cast<long long>(sh.seq) * H + sh.h) * P * N : no_dstate();
#endif
  } else {
    wait_for(backward_flags(p) + slot + H);
    s.gds = p.ws_dstates + (slot + H) * P * N;
  }
  const float alpha = s.vv(kVecE)[len - 1];
  float* out = p.ws_dstates + slot * P * N;
  float part = 0.f;
#if M3_CP_HANDOFF_CARRIES >= 3
  // The hand-off sums from the update's own registers (G as it is formed, S as loaded for part):
  // no second read of S (run 157: level 2's 16 LDS.64 and 17 shuffles a thread cost what the
  // chain saved; the backward is bound by the L1 pipe that both use).
  float hand_gs = 0.f, hand_cross[StateTile::NTL] = {};
#endif
#if M3_FRAG_DS
  // The gradients (and under M3_CP_FRAG_STATES the state) in fragment order: per row a thread
  // holds two 16-byte words of each. All loads of a row pair come before its arithmetic, which
  // keeps CONFLICT_FREE's order (j, h, e within i) for `part`; the stores follow in a second pass.
#if M3_CP_EARLY_DSTATE
  // v146: the successor's gradient for every row pair at once, one L2 round trip instead of MT.
  float4 old_all[StateTile::MT][2][2];
#pragma unroll
  for (int i = 0; i < StateTile::MT; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        old_all[i][h][e] = s.ds4(upd.m0 + i * 16 + upd.g + (h << 3), upd.n0 + 4 * frag_word(2 * upd.t + e));
#endif
#pragma unroll
  for (int i = 0; i < StateTile::MT; ++i) {
    float4 old[2][2];
#if M3_FRAG_ST
    float4 st[2][2];
#else
    float2 st[2][StateTile::NTL];  // row-major: columns n0 + 8 j + 2 t and the next
#endif
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = upd.m0 + i * 16 + upd.g + (h << 3);
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int pos = upd.n0 + 4 * frag_word(2 * upd.t + e);
#if M3_CP_EARLY_DSTATE
        old[h][e] = old_all[i][h][e];
#else
        old[h][e] = s.ds4(r, pos);
#endif
#if M3_FRAG_ST
        st[h][e] = s.st4(r, pos);
#endif
      }
#if !M3_FRAG_ST
#pragma unroll
      for (int jj = 0; jj < StateTile::NTL; ++jj) {
#if M3_CP_SMEM_STATE && M3_CP_SWIZZLE_FOLD
        static_assert(StateTile::NTL == 4 && StateTile::WN == 32 && StateTile::WM % 16 == 0, "see ss_tile_col");
        st[h][jj] = *reinterpret_cast<const float2*>(s.t1 + r * N + ss_tile_col(upd.n0, jj, 2 * upd.t, upd.g & 3));
#elif M3_CP_SMEM_STATE
        st[h][jj] = *reinterpret_cast<const float2*>(s.t1 + M3_SS(r, upd.n0 + 8 * jj + 2 * upd.t));
#else
        st[h][jj] = s.gst ? M3_STATE_LOAD(reinterpret_cast<const float2*>(s.gst + r * N + upd.n0 + 8 * jj + 2 * upd.t))
                          : make_float2(0.f, 0.f);
#endif
      }
#endif
    }
#pragma unroll
    for (int jj = 0; jj < StateTile::NTL; ++jj)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float o = quad_at(old[h][e], jj);
#if M3_FRAG_ST
          part = fmaf(o, quad_at(st[h][e], jj), part);
#else
          part = fmaf(o, e ? st[h][jj].y : st[h][jj].x, part);
#endif
          upd.acc[i][jj][2 * h + e] = alpha * o + upd.acc[i][jj][2 * h + e];
        }
#if M3_CP_HANDOFF_CARRIES >= 3
    static_assert(!M3_FRAG_ST, "S as float2 pairs");
#pragma unroll
    for (int jj = 0; jj < StateTile::NTL; ++jj)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float g0 = upd.acc[i][jj][2 * h], g1 = upd.acc[i][jj][2 * h + 1];
        hand_gs = fmaf(g0, st[h][jj].x, hand_gs);
        hand_gs = fmaf(g1, st[h][jj].y, hand_gs);
        hand_cross[jj] = fmaf(g0, st[h][jj].y, hand_cross[jj]);
        hand_cross[jj] = fmaf(-g1, st[h][jj].x, hand_cross[jj]);
      }
#endif
  }
  if (j > 0) {
    upd.for_each_row([&](int i, int h, int r) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        *reinterpret_cast<float4*>(out + r * N + upd.n0 + 4 * frag_word(2 * upd.t + e)) =
            make_float4(upd.acc[i][0][2 * h + e], upd.acc[i][1][2 * h + e], upd.acc[i][2][2 * h + e],
                        upd.acc[i][3][2 * h + e]);
      }
    });
  }
#elif M3_CP_CONFLICT_FREE
  // The accumulators become the new gradient in place, and the stores follow in a second pass:
  // no load waits behind a store.
  upd.for_each_pair([&](int r, int c, float& acc0, float& acc1) {
    const float2 zero = make_float2(0.f, 0.f);
    const float2 old = M3_DS_GIVEN(s.gds) ? __ldcg(reinterpret_cast<const float2*>(s.gds + r * N + c)) : zero;
    const float2 st = s.gst ? M3_STATE_LOAD(reinterpret_cast<const float2*>(s.gst + r * N + c)) : zero;
    part = fmaf(old.x, st.x, part);
    part = fmaf(old.y, st.y, part);
    acc0 = alpha * old.x + acc0;
    acc1 = alpha * old.y + acc1;
  });
  if (j > 0) {
    upd.for_each_pair([&](int r, int c, float acc0, float acc1) {
      *reinterpret_cast<float2*>(out + r * N + c) = make_float2(acc0, acc1);
    });
  }
#else
  upd.for_each_pair([&](int r, int c, float acc0, float acc1) {
    const float2 zero = make_float2(0.f, 0.f);
    const float2 old = M3_DS_GIVEN(s.gds) ? __ldcg(reinterpret_cast<const float2*>(s.gds + r * N + c)) : zero;
    const float2 st = s.gst ? M3_STATE_LOAD(reinterpret_cast<const float2*>(s.gst + r * N + c)) : zero;
    part = fmaf(old.x, st.x, part);
    part = fmaf(old.y, st.y, part);
    if (j > 0) *reinterpret_cast<float2*>(out + r * N + c) = make_float2(alpha * old.x + acc0, alpha * old.y + acc1);
  });
#endif
#else
  if (last) {
    const float* dfs = p.dfinal_ssm;
    const long long row = static_cast<long long>(sh.seq) * H + sh.h;
    for (int e = tid; e < P * N; e += NT) s.ds[(e / N) * LDN + (e % N)] = dfs ? dfs[row * P * N + e] : 0.f;
  } else {
    wait_for(backward_flags(p) + slot + H);
    stage_state<true>(p.ws_dstates + (slot + H) * P * N, s.ds);
  }
  __syncthreads();
  const float alpha = s.vv(kVecE)[len - 1];
  float* out = p.ws_dstates + slot * P * N;
  float part = 0.f;
#if M3_PAIRED_STATE_STORES
  upd.for_each_pair([&](int r, int c, float acc0, float acc1) {
    const float2 old = *reinterpret_cast<const float2*>(s.ds + r * LDN + c);
    const float2 st = *reinterpret_cast<const float2*>(s.st + r * LDN + c);
    part = fmaf(old.x, st.x, part);
    part = fmaf(old.y, st.y, part);
    if (j > 0) *reinterpret_cast<float2*>(out + r * N + c) = make_float2(alpha * old.x + acc0, alpha * old.y + acc1);
  });
#else
  upd.for_each([&](int r, int c, float acc) {
    const float old = s.ds[r * LDN + c];
    part = fmaf(old, s.st[r * LDN + c], part);
    if (j > 0) out[r * N + c] = alpha * old + acc;
  });
#endif
#endif  // M3_CP_GLOBAL_STATES
#if M3_CP_TRIMS2
  // The warp totals wait in red[kDaWords, kDaWords + NW), clear of the tail carries; the tail adds
  // them up after barriers enough.
  constexpr int kDaWords = 64;
  static_assert((M3_CP_HANDOFF_CARRIES || kDaWords >= kTailWords) && kDaWords + NW <= NT,
                "red holds the carries and the da words");
  part = warp_sum(part);
  if ((tid & 31) == 0) s.red[kDaWords + (tid >> 5)] = part;
#elif M3_CP_TRIMS
  const float da = alpha * block_sum_two_level<NT>(part, s.red);
#else
  const float da = alpha * block_sum<NT>(part, s.red);
#endif
  if (j > 0) publish(backward_flags(p) + slot);
#if M3_CP_HANDOFF_CARRIES >= 3
  if (j > 0) write_handoff_sums(p, upd, slot, hand_gs, hand_cross);
#elif M3_CP_HANDOFF_CARRIES
  if (j > 0) write_handoff_partials(p, s, upd, slot);
#endif

  backward_intra(p, sh, s, a, len);
#if M3_CP_HANDOFF_CARRIES == 4
  // dc_pending as soon as u is in (backward_intra's last barrier), and the successor's record and
  // K on their way into red while the epilogue runs: by the tail they have long arrived.
  static_assert(kDaWords == kHandoffDaWords, "the copies sit after the da words");
  if (tid < 32) {
    if (j > 0) {
      float da_sum = 0.f;
#pragma unroll
      for (int w = 0; w < NW; ++w) da_sum += s.red[kDaWords + w];
      const float pending = dc_pending_word(s, tid, len, alpha * da_sum);
      if (tid == 0) put_record_word(p.ws_tail + slot * kTailWords + kRecDcPending, pending);
    }
    if (!last) copy_handoff_words(p, s, slot + H, slot + static_cast<long long>(chunks - 1 - j) * H);
  }
#endif
  float qb[kBiasRegs] = {}, kb[kBiasRegs] = {};
  backward_token_epilogue(p, sh, s, a, len, qb, kb);
#if M3_CP_PERSISTENT == 2
  draw_ticket(p.ws_sync + 1, next);
#endif
#if M3_CP_EARLY_BIAS
  write_bias_partials(p, s, slot, qb, kb, 0.f, /*with_dd=*/false);
#endif
#if M3_CP_HEAD_CLUSTERS
  cluster_wait();    // every rank has read the ticket
  cluster_arrive();  // this CTA's dq/dk rows are in t2 and kr; the tail below leaves them alone
#endif

  // The reverse-cumsum carries and the one-token shift terms of the chunk after this one.
#if M3_CP_TRIMS2
  // Read by warp 0 alone: lane 0 waits for the flag, the warp barrier orders the lanes' reads
  // after it; the angle carries go to shared memory for every warp, the rest stays in warp 0.
  static_assert(A == 32, "a lane per angle carry");
  BackwardCarry bc{0.f, 0.f, 0.f, 0.f, 0.f};
  if (tid < 32) {
#if M3_CP_HANDOFF_CARRIES >= 2
    // The successor's early words and K from the sequence's last chunk, polled until none is
    // unwritten (K is long there unless the last chunk is the successor).
    float phi_carry = 0.f, gs = 0.f, pending = 0.f;
    if (!last) {
      const long long slot_last = slot + static_cast<long long>(chunks - 1 - j) * H;
      const float* rec = p.ws_tail + (slot + H) * kTailWords;
      const float* k_vec = p.ws_tail + slot_last * kTailWords + kRecK;
#if M3_CP_HANDOFF_CARRIES == 4
      // The copies made after backward_intra; polled from L2 only if one of them came too early.
      asm volatile("cp.async.wait_all;" ::: "memory");
      __syncwarp();
      const float* cp = s.red + kHandoffCopy;
      if (!take_handoff_words(cp[kRecCross + tid], cp[kRecCross + A + tid], cp[kCopyK + tid], cp[kRecGs + tid],
                              cp[kRecDcPending], phi_carry, gs, pending))
#endif
      for (;;) {
        if (take_handoff_words(poll_record_word(rec + kRecCross + tid), poll_record_word(rec + kRecCross + A + tid),
                               poll_record_word(k_vec + tid), tid < kGsWords ? poll_record_word(rec + kRecGs + tid) : 0.f,
                               poll_record_word(rec + kRecDcPending), phi_carry, gs, pending))
          break;
        __nanosleep(64);
      }
    }
    s.big_phi_carry()[tid] = phi_carry;
    bc.dadt_run = warp_sum(gs);  // the same bits in every lane: each level adds the same pair
    bc.dc_pending = pending;
#elif M3_CP_HANDOFF_CARRIES
    // The successor's early words, and K from the sequence's last chunk (long done unless that
    // is the successor, whose flag then covers K too).
    float phi_carry = 0.f, gs = 0.f, pending = 0.f;
    if (!last) {
      const long long slot_last = slot + static_cast<long long>(chunks - 1 - j) * H;
      if (tid == 0) {
        spin_acquire(tail_flags(p) + slot + H);
        if (slot_last != slot + H) spin_acquire(tail_flags(p) + slot_last);
      }
      __syncwarp();
      const float* rec = p.ws_tail + (slot + H) * kTailWords;
      phi_carry = (__ldcg(rec + kRecCross + tid) + __ldcg(rec + kRecCross + A + tid)) +
                  __ldcg(p.ws_tail + slot_last * kTailWords + kRecK + tid);
      gs = tid < NW ? __ldcg(rec + kRecGs + tid) : 0.f;
      pending = __ldcg(rec + kRecDcPending);
    }
    s.big_phi_carry()[tid] = phi_carry;
    bc.dadt_run = warp_sum(gs);  // the same bits in every lane: each level adds the same pair
    bc.dc_pending = pending;
#else
    float phi_carry = 0.f, extra = 0.f;
    if (!last) {
      if (tid == 0) spin_acquire(tail_flags(p) + slot + H);
      __syncwarp();
      const float* rec = p.ws_tail + (slot + H) * kTailWords;
      phi_carry = __ldcg(rec + tid);
      extra = tid < 4 ? __ldcg(rec + A + tid) : 0.f;
    }
    s.big_phi_carry()[tid] = phi_carry;
    bc.dadt_run = __shfl_sync(0xffffffffu, extra, 0);
    bc.dc_pending = __shfl_sync(0xffffffffu, extra, 1);
    bc.ddt_first = __shfl_sync(0xffffffffu, extra, 2);
    bc.dp_first = __shfl_sync(0xffffffffu, extra, 3);
#endif
  }
  __syncthreads();
#if M3_CP_OVERLAPPED_REDUCE
  // The epilogue's dq/dk partial stores of every thread come before the barrier above; thread 0's
  // release, cumulative over it as in publish, hands them to the reduce with the count. Counted
  // by the ticket's table entry (job_words[3]), which the reduce's blocks are laid out by; the
  // chunk index held in a register through the epilogue cost 16 bytes of spills.
  if (tid == 0 && !M3_CP_LATE_HEADS_DONE) {
#if M3_CP_INLINE_HEAD_SUMS
    const int* w = job_words;  // by chunk index: chunk_base + j, j from the ticket's round
    const int counted = w[6] + m3_backward_chunk(w[5], C, w[1]);
#else
    const int counted = job_words[3];
#endif
    asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(heads_done(p) + counted) : "memory");
  }
#endif
#if M3_CP_DISCARD_DEAD
  // The update and backward_intra's products, before the barrier above, were the last reads of
  // the successor's gradient (for the last chunk the final state's, in the spare slot after it)
  // and of the forward's entering state: a 128-byte line of each per thread.
  if (!last || p.dfinal_ssm) discard_l2_line(p.ws_dstates + (slot + H) * P * N + tid * 32);
#if M3_CP_OVERLAPPED_BACKWARD
  // The forward's job of this chunk, which may run beside this one, reads the same entering state:
  // dropped only once that job's own flag shows it has read it (the last chunk raises none, and
  // its state stays in L2).
  if (j > 0 && !last) {
    int forward_done;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(forward_done) : "l"(forward_flags(p) + slot) : "memory");
    if (forward_done) discard_l2_line(p.ws_states + slot * P * N + tid * 32);
  }
#else
  if (j > 0) discard_l2_line(p.ws_states + slot * P * N + tid * 32);
#endif
#endif
  float da_sum = 0.f;
#pragma unroll
  for (int w = 0; w < NW; ++w) da_sum += s.red[kDaWords + w];
  const float da = alpha * da_sum;
#if M3_CP_HANDOFF_CARRIES && M3_CP_HANDOFF_CARRIES != 4  // level 4: after backward_intra
  if (j > 0 && tid < 32) {
    // dc_pending (the chunk's dc terms that fall on the token before it) completes the early
    // words. Level 1 flags them: the barrier above ordered every warp's partials before thread
    // 0's release, and the last chunk raises its flag only once K is in.
    const float pending = dc_pending_word(s, tid, len, da);
    if (tid == 0) {
      put_record_word(p.ws_tail + slot * kTailWords + kRecDcPending, pending);
#if M3_CP_HANDOFF_CARRIES == 1
      if (!last) asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(tail_flags(p) + slot) : "memory");
#endif
    }
  }
#endif
  backward_token_scalars_parallel(p, sh, s, a, len, last, da, 0.f, bc);
#if M3_CP_LATE_HEADS_DONE
  // The per-token tail's barriers came after every thread's epilogue stores, as the tail's first
  // barrier did: the release is cumulative over them.
  static_assert(M3_CP_OVERLAPPED_REDUCE && !M3_CP_INLINE_HEAD_SUMS && NW > 1, "the ticket's count, a warp beside warp 0");
  if (tid == 32) asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(heads_done(p) + job_words[3]) : "memory");
#endif
#if M3_CP_HANDOFF_CARRIES >= 2
  // K (the last chunk), this chunk's half of the shift at the boundary before it, and the first
  // poll of the successor's half, which thread 0 uses only after the bias partials below.
  float dgl = 0.f, dtn = 0.f, late[3] = {};
  if (tid < 32) {
    float* rec = p.ws_tail + slot * kTailWords;
    if (j > 0 && last) {
      put_record_word(rec + kRecK + tid, sequence_k_word(s, rec, tid));
    }
    if (tid == 0 && j > 0) {
      put_record_word(rec + kRecDdtFirst, bc.ddt_first);
      put_record_word(rec + kRecDpFirst, bc.dp_first);
      put_record_word(rec + kRecPn, s.vv(kVecP)[0]);
    }
    if (tid == 0 && !last) {
      dgl = s.vv(kVecDgam)[len - 1];
      // The token's dt is an input, which may hold any NaN, kUnwritten's too: taken from this
      // job's own copy (the same load as the successor's), never through the record.
      dtn = s.scalars()[kScalarDtNext];
      static_assert(kRecDpFirst == kRecDdtFirst + 1 && kRecPn == kRecDdtFirst + 2,
                    "the successor's half in three consecutive words");
#pragma unroll
      for (int q = 0; q < 3; ++q) late[q] = poll_record_word(p.ws_tail + (slot + H) * kTailWords + kRecDdtFirst + q);
    }
  }
#elif M3_CP_HANDOFF_CARRIES
  if (tid < 32) {
    float* rec = p.ws_tail + slot * kTailWords;
    if (j > 0 && last) {
      put_record_word(rec + kRecK + tid, sequence_k_word(s, rec, tid));
      __syncwarp();
      if (tid == 0) asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(tail_flags(p) + slot) : "memory");
    }
    if (tid == 0) {
      if (j > 0) {
        rec[kRecDdtFirst] = bc.ddt_first;
        rec[kRecDpFirst] = bc.dp_first;
        rec[kRecPn] = s.vv(kVecP)[0];
        rec[kRecDtn] = s.vv(kVecDt)[0];
        meet_at_boundary(p, sh.h, rec, tail_flags(p) + slot, sh.start + a);
      }
      if (!last) {
        float* next = p.ws_tail + (slot + H) * kTailWords;
        next[kRecDgl] = s.vv(kVecDgam)[len - 1];
        meet_at_boundary(p, sh.h, next, tail_flags(p) + slot + H, sh.start + a + len);
      }
    }
  }
#else
  if (j > 0 && tid < 32) {
    // Warp 0's writes, ordered by the warp barrier before lane 0's release.
    float* rec = p.ws_tail + slot * kTailWords;
    rec[tid] = s.big_phi_carry()[tid];
    if (tid == 0) {
      rec[A] = bc.dadt_run;
      rec[A + 1] = bc.dc_pending;
      rec[A + 2] = bc.ddt_first;
      rec[A + 3] = bc.dp_first;
    }
    __syncwarp();
    if (tid == 0) asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(tail_flags(p) + slot), "r"(1) : "memory");
  }
#endif
#if M3_CP_HEAD_CLUSTERS
  cluster_wait();
  sum_cluster_heads(p, s, sh.h, sh.start + a, len);
  cluster_arrive();
#endif
  // bc.dd_sum is this chunk's share of dd; thread 0, the only one to use it, holds it.
#if M3_CP_EARLY_BIAS
  if (tid == 0) p.ws_partial[slot * (2 * N + 1) + 2 * N] = bc.dd_sum;
#else
  write_bias_partials(p, s, slot, qb, kb, bc.dd_sum);
#endif
#if M3_CP_HANDOFF_CARRIES >= 2
  // ddt and dtrap of the successor's first token: its half of the shift (polled again only if
  // the first poll found it unwritten) and dgamma of this chunk's last token.
  if (tid == 0 && !last) {
    const float* next = p.ws_tail + (slot + H) * kTailWords + kRecDdtFirst;
    while (unwritten(late[0]) || unwritten(late[1]) || unwritten(late[2])) {
      __nanosleep(64);
#pragma unroll
      for (int q = 0; q < 3; ++q) late[q] = poll_record_word(next + q);
    }
    const float ddt_first = late[0], dp_first = late[1], pn = late[2];
    const long long at = static_cast<long long>(sh.h) * p.T + sh.start + a + len;
    p.ddt[at] = ddt_first + dgl * (1.f - pn);
    p.dtrap[at] = f2bf((dp_first - dgl * dtn) * pn * (1.f - pn));
  }
#endif
#if M3_CP_HEAD_CLUSTERS
  cluster_wait();  // no peer reads this CTA's rows any more
#endif
#if M3_CP_FUSED_HEADS
  reduce_heads_of_chunk(p, g, sh.start + a, len);
#endif
#if M3_CP_INLINE_HEAD_SUMS
  sum_heads_ahead(p, job_words);
#endif
#if M3_CP_OVERLAPPED_BACKWARD
  m3_wait_for_previous_kernel<true>();  // not done before the forward is
#endif
#else
  float* carries = s.red;  // free between block sums; holds A + 4 words
  if (last) {
    if (tid < kTailWords) carries[tid] = 0.f;
  } else {
    wait_for(tail_flags(p) + slot + H);
    if (tid < kTailWords) carries[tid] = __ldcg(p.ws_tail + (slot + H) * kTailWords + tid);
  }
  __syncthreads();
  if (tid < A) s.big_phi_carry()[tid] = carries[tid];
  BackwardCarry bc{carries[A], carries[A + 1], carries[A + 2], carries[A + 3], 0.f};
  __syncthreads();
  backward_token_scalars_parallel(p, sh, s, a, len, last, da, 0.f, bc);
  if (j > 0) {
    float* rec = p.ws_tail + slot * kTailWords;
    if (tid < A) rec[tid] = s.big_phi_carry()[tid];
    if (tid == 0) {
      rec[A] = bc.dadt_run;
      rec[A + 1] = bc.dc_pending;
      rec[A + 2] = bc.ddt_first;
      rec[A + 3] = bc.dp_first;
    }
    publish(tail_flags(p) + slot);
  }
  // bc.dd_sum is this chunk's share of dd; warp 0 holds it.
  __shared__ float dd_share;
  if (tid == 0) dd_share = bc.dd_sum;
  __syncthreads();
  write_bias_partials(p, s, slot, qb, kb, dd_share);
#endif
#if M3_CP_PERSISTENT_BACKWARD
  }
#endif
}

#if M3_CP_FORWARD64
#include "m3_forward64.cuh"
#endif
#if M3_CP_BACKWARD64Q
#include "m3_backward64q.cuh"
#endif
#if M3_CP_BACKWARD64KV
#include "m3_backward64kv.cuh"
#endif
#if M3_CP_BACKWARD64
#include "m3_backward64.cuh"
#endif
