// One CTA per (sequence, head) walks the sequence's chunks forward, then backward. Every matmul
// goes through one tile type: fp32 FMA on the CUDA cores (v1, M3_USE_MMA=0), or tf32 tensor
// cores with fp32 accumulation (v2, M3_USE_MMA=1). Decays, angles and reductions stay fp32.
//
// Forward, chunk j = [a, a+len): outputs, dz (the gate gradient needs only y and dout), and the
// state entering the chunk, saved for the backward. Backward, chunks in reverse with dS: every
// per-token gradient of the chunk, with the sequence-long reverse cumsums (dadt, Phi) and the
// one-token shift of the dt/trap terms carried from chunk to chunk.
//
// Specialisation: M3_CHUNK, M3_N, M3_P, M3_A, M3_THREADS, M3_SEQ_BUCKET (S rounded up to a bucket,
// 0 = any S; read by the walker's locate() alone, so the chunk-parallel sources always pass 0),
// M3_USE_MMA and M3_PAD (shared-memory row padding in words). Head count and lengths
// are run-time values.
#pragma once

#include "m3_common.cuh"

#ifndef M3_PARALLEL_SCALARS
#define M3_PARALLEL_SCALARS 0
#endif
#ifndef M3_VECTOR_IO
#define M3_VECTOR_IO 0
#endif
#ifndef M3_STAGE_ALL
#define M3_STAGE_ALL 0
#endif
#ifndef M3_INITIAL_STATES
#define M3_INITIAL_STATES 0
#endif
#if M3_STAGE_ALL && !(M3_VECTOR_IO && M3_PARALLEL_SCALARS)
#error "M3_STAGE_ALL builds on M3_VECTOR_IO and M3_PARALLEL_SCALARS"
#endif
#if M3_INITIAL_STATES && !M3_PARALLEL_SCALARS
#error "M3_INITIAL_STATES builds on M3_PARALLEL_SCALARS"
#endif
// M3_CP_TRIMS (v15): shorter serial latency chains per chunk, for the chunk-parallel kernels, whose
// time is the latency of one chunk's ~25 barrier-separated phases at one CTA per SM: independent
// warp reductions and scans interleaved, the decay row/column sums over all threads instead of
// one warp's serial loop, the backward epilogue's unrotated q and k rebuilt from the rotated rows
// instead of loaded again, and the next chunk's first trap and dt kept from the load.
#ifndef M3_CP_TRIMS
#define M3_CP_TRIMS 0
#endif
#if M3_CP_TRIMS && !(M3_STAGE_ALL && M3_VECTOR_IO && M3_PARALLEL_SCALARS)
#error "M3_CP_TRIMS builds on M3_STAGE_ALL"
#endif
#if M3_CP_ROW_PAIRED_LANES && !(M3_CP_TRIMS && M3_VECTOR_IO)
#error "M3_CP_ROW_PAIRED_LANES needs M3_CP_TRIMS and M3_VECTOR_IO"
#endif
// M3_CP_PREFETCH (v17): every input tile of a chunk (q, k, v, z, dout, angles and, in the
// backward, the state entering it) requested at the kernel's start with cp.async into an idle
// tile, and waited for once, at load_chunk's first barrier: one memory round trip where the
// staging phases took about five in sequence.
#ifndef M3_CP_PREFETCH
#define M3_CP_PREFETCH 0
#endif
#if M3_CP_PREFETCH && !M3_CP_TRIMS
#error "M3_CP_PREFETCH builds on M3_CP_TRIMS"
#endif
// M3_CP_FRAG_SUMS (v19): the per-token sums of the backward's intra-chunk part (the decay row and
// column sums of dM * M, x = v . (state part), dy . v and u = qr . (inter part)) taken from the
// tensor-core accumulators as each product completes, as per-warp partials, instead of in three
// phases of their own that read the products back from shared memory: three barriers fewer.
#ifndef M3_CP_FRAG_SUMS
#define M3_CP_FRAG_SUMS 0
#endif
#if M3_CP_FRAG_SUMS && !(M3_CP_TRIMS && M3_USE_MMA)
#error "M3_CP_FRAG_SUMS builds on M3_CP_TRIMS and the tensor-core tiles"
#endif
// M3_CP_TRIMS2 (v21): barriers that guard nothing in the chunk-parallel backward dropped: the
// ticket's second one, the state-gradient block sum's two (its total is needed only in the tail),
// two around the tail carries (warp 0 alone reads them), the closing one of the per-token tail and
// the one that handed dd to thread 0, which already holds it; the tail record is published by
// warp 0 alone. Also m3_cp_angles: two chunk totals per warp at a time, and the sums entering the
// chunks by warp scans instead of warp 0's walk.
#ifndef M3_CP_TRIMS2
#define M3_CP_TRIMS2 0
#endif
#if M3_CP_TRIMS2 && !M3_CP_FRAG_SUMS
#error "M3_CP_TRIMS2 builds on M3_CP_FRAG_SUMS"
#endif
// M3_CP_HANDOFF_CARRIES (v237, v238): a backward job no longer waits, at the start of its
// per-token tail, for the successor's tail record written at the successor's very end (run 155:
// that chain was 4.6% of m3_cp_backward). The angle and decay carries are functions of what the
// successor holds at its state-gradient update (design note, "Chunk-local rotary frames, and the
// carries a hand-off already holds"): the sum of dphi over every later token is cross(G, S) + K
// and that of dc is sum G S, with S the state entering the successor's chunk, G its gradient and
// K one vector per sequence and head, which the sequence's last chunk works out from its own
// tail. The successor writes those partials right after its update and raises its tail flag at
// the start of its tail. Only the one-token shift of the trapezoid stays late: each side of a
// chunk boundary writes its half (ddt and dp of the first token; dgamma of the last token before
// it) and the second to arrive combines them, so nobody waits for it.
// Level 2 (v240, v241): run 156 found level 1's backward 5 to 9% slower than v231's; its flags
// cost a fence each (the early one before warp 0's per-token tail, behind the epilogue's stores)
// and the boundary an acq_rel atomic a side. Level 2 has neither: m3_cp_angles fills the tail
// records with a NaN no arithmetic makes (kUnwritten), every word is written once by a relaxed
// store and read by relaxed loads until it is not kUnwritten (a 32-bit word arrives whole), and
// the job of chunk j - 1 writes ddt and dtrap of chunk j's first token itself, at its very end,
// from chunk j's half, which by then is almost always there.
// Level 3 (v243, v244; runs 158 and 159): the sums formed in the update loop from the registers
// that hold G and S (no second pass over S), the four angle sums of a warp by a transposed
// butterfly. Level 4 (v246, v247; run 161, 2.6% off level 3's backward): dc_pending written right
// after backward_intra, and the successor's record and K copied into shared memory by cp.async
// during the epilogue, so that the tail reads L2 only if a copy came too early.
#ifndef M3_CP_HANDOFF_CARRIES
#define M3_CP_HANDOFF_CARRIES 0
#endif
#if M3_CP_HANDOFF_CARRIES && !M3_CP_TRIMS2
#error "M3_CP_HANDOFF_CARRIES replaces M3_CP_TRIMS2's tail record"
#endif
// M3_CP_GLOBAL_STATES (v23): the backward keeps neither the entering state nor the state gradient
// in shared memory: the three tile products that use them and the update read their operands
// straight from global memory (the state from the forward's workspace, the gradient from L2, where
// the next chunk just published it). 107 KB of shared memory and at most 128 registers: two CTAs
// per SM instead of one, for a kernel whose warps mostly wait on their own latencies.
#ifndef M3_CP_GLOBAL_STATES
#define M3_CP_GLOBAL_STATES 0
#endif
#if M3_CP_GLOBAL_STATES && !(M3_CP_TRIMS2 && M3_PAIRED_STATE_STORES)
#error "M3_CP_GLOBAL_STATES builds on M3_CP_TRIMS2 and M3_PAIRED_STATE_STORES"
#endif
// M3_CP_CONFLICT_FREE (v25): the accesses run 28's source-level profile flagged, with results
// bitwise unchanged: the angle tiles' rows padded to A + 1 floats (the column scans read down a
// column, 32-way bank conflicts at a stride of 32), the state-gradient update's global loads all
// issued before its stores (interleaved, each pair waited a full L2 round trip: the compiler
// cannot tell the output from the inputs), and the bias partials stored 16 bytes at a time.
#ifndef M3_CP_CONFLICT_FREE
#define M3_CP_CONFLICT_FREE 0
#endif
#if M3_CP_CONFLICT_FREE && !M3_CP_GLOBAL_STATES
#error "M3_CP_CONFLICT_FREE builds on M3_CP_GLOBAL_STATES"
#endif
// M3_CP_FRAG_STATES (v27): the states in the workspace, and the state gradients, in the order the
// tensor-core fragments read them (frag_pos): the backward's three products that read them from
// global memory, and the state updates, move 16 bytes per load and store instead of 4 or 8
// (run 28: those scalar loads were 11% of the backward's instructions and of its stall samples).
// Results bitwise M3_CP_CONFLICT_FREE's. The gradient of a final state, row-major from the caller,
// is reordered by m3_cp_angles into the slot after the sequence's last chunk.
#ifndef M3_CP_FRAG_STATES
#define M3_CP_FRAG_STATES 0
#endif
// M3_CP_FRAG_DSTATES (v33): only the state gradients in fragment order (v29's word order); the
// states stay row-major, so the forward is v25's (v27 to v31's forwards lost 10 to 17% to the
// reordering, runs 31 to 34, for no gain of their own).
#ifndef M3_CP_FRAG_DSTATES
#define M3_CP_FRAG_DSTATES 0
#endif
#define M3_FRAG_ST M3_CP_FRAG_STATES                              // the states in fragment order
#define M3_FRAG_DS (M3_CP_FRAG_STATES || M3_CP_FRAG_DSTATES)      // the state gradients
#if M3_FRAG_DS && (!M3_CP_CONFLICT_FREE || M3_SPLIT_TF32 || !M3_USE_MMA)
#error "M3_CP_FRAG_STATES and M3_CP_FRAG_DSTATES build on M3_CP_CONFLICT_FREE, with plain tf32 tensor-core products"
#endif
#if M3_CP_FRAG_STATES && M3_CP_FRAG_DSTATES
#error "M3_CP_FRAG_DSTATES is M3_CP_FRAG_STATES without the states: one or the other"
#endif
#if defined(M3_CP_FULL_SECTORS) && M3_CP_FULL_SECTORS && !M3_FRAG_DS
#error "M3_CP_FULL_SECTORS builds on M3_CP_FRAG_STATES or M3_CP_FRAG_DSTATES"
#endif
// M3_CP_FWD_GLOBAL_STATE (v31): the forward reads the state entering its chunk straight from the
// workspace, in fragment order, as the backward does: the update as 16-byte words that match its
// accumulators, the inter-chunk product through mac_frag_rows. No shared state tile, so no
// staging between the wait and the publish (run 33: re-ordering it into shared memory was 10% of
// v29's forward stall samples). Results bitwise v29's.
#ifndef M3_CP_FWD_GLOBAL_STATE
#define M3_CP_FWD_GLOBAL_STATE 0
#endif
// M3_CP_FWD_GLOBAL_STATE=2 (v115): the same with the states row-major (M3_CP_FRAG_DSTATES, so the
// backward is v103's): the update reads 8-byte pairs at the accumulators' columns, and the
// inter-chunk product takes each block of 32 k in mac_rows_contiguous_k's order (other groups of
// eight: outputs within rounding of v103's, states bitwise).
#if M3_CP_FWD_GLOBAL_STATE == 1 && !M3_CP_FRAG_STATES
#error "M3_CP_FWD_GLOBAL_STATE reads the states in fragment order: it needs M3_CP_FRAG_STATES"
#endif
#if M3_CP_FWD_GLOBAL_STATE == 2 && M3_CP_FRAG_STATES
#error "M3_CP_FWD_GLOBAL_STATE=2 reads row-major states: not with M3_CP_FRAG_STATES"
#endif
#if M3_CP_FWD_GLOBAL_STATE > 2
#error "M3_CP_FWD_GLOBAL_STATE is 0, 1 (fragment order) or 2 (row-major)"
#endif
// M3_CP_FORWARD_MIN_CTAS (v113): the forward kernel's minimum CTAs per SM in __launch_bounds__.
// Two (v11 on) give it 128 registers; three need M3_CP_FWD_GLOBAL_STATE's layout (76 KB without
// the state tile, three CTAs and their reserved 1 KB each in the SM's 228 KB) and 80 registers,
// which ptxas reaches without new spills.
#ifndef M3_CP_FORWARD_MIN_CTAS
#define M3_CP_FORWARD_MIN_CTAS 2
#endif
#if M3_CP_FORWARD_MIN_CTAS > 2 && !M3_CP_FWD_GLOBAL_STATE
#error "three forward CTAs per SM need M3_CP_FWD_GLOBAL_STATE's layout"
#endif
// M3_CP_BULK_STATE (v117): the forward's entering state comes into its shared tile by bulk
// copies of the TMA engine (one per 512-byte row, counted in on an mbarrier) instead of 256
// threads' 16-byte loads and stores. Run 88 measured such copies at no L1 data-pipe wavefronts;
// the staging they replace is about 512 of a forward job's (256 global loads, 256 shared stores),
// in a kernel that pipe bounds (run 86). Same data, same tile: results bitwise v103's. Run 89:
// the forward 9 to 26% slower, the copies' latency on the chain; kept as the measured record.
#ifndef M3_CP_BULK_STATE
#define M3_CP_BULK_STATE 0
#endif
#if M3_CP_BULK_STATE && (M3_CP_FWD_GLOBAL_STATE || M3_CP_FRAG_STATES || M3_CP_PERSISTENT)
#error "M3_CP_BULK_STATE stages row-major states into the forward's tile, once per CTA (no persistent CTAs)"
#endif
#if M3_CP_FWD_GLOBAL_STATE && !(M3_CP_FULL_SECTORS && M3_CP_LEAN_FORWARD)
#error "M3_CP_FWD_GLOBAL_STATE builds on M3_CP_FULL_SECTORS and M3_CP_LEAN_FORWARD"
#endif
#if !defined(M3_CHUNK) || !defined(M3_N) || !defined(M3_P) || !defined(M3_A) || \
    !defined(M3_THREADS) || !defined(M3_SEQ_BUCKET) || !defined(M3_USE_MMA) || !defined(M3_PAD)
#error "m3_chunk_scan.cuh needs M3_CHUNK, M3_N, M3_P, M3_A, M3_THREADS, M3_SEQ_BUCKET, M3_USE_MMA, M3_PAD"
#endif

namespace m3scan {

constexpr int C = M3_CHUNK;
constexpr int N = M3_N;
constexpr int P = M3_P;
constexpr int A = M3_A;
constexpr int NT = M3_THREADS;
constexpr int NW = NT / 32;
constexpr int LDN = N + M3_PAD;
constexpr int LDP = P + M3_PAD;
constexpr int LDC = C + M3_PAD;
// The q/k tiles' and the v/dy tiles' row strides, and where row r starts (M3_CP_ROWS8, v138;
// m3_common.cuh says why); the padded tiles' otherwise.
constexpr int LDQK = M3_CP_ROWS8 ? N + 8 : LDN;
constexpr int LDVY = M3_CP_ROWS8 ? P + 8 : LDP;
// M3_CP_ROWS8=2 (v140): the q/k tiles' odd rows also hold each octet's halves swapped (column c at
// c ^ 4), so that the staging's quarter-warps, which store an even and an odd row, meet 32 banks;
// their rows 4-7 of every 8 then start 8 floats late, which keeps ldmatrix's eight rows apart.
constexpr int kQkFlip = M3_CP_ROWS8 >= 2 ? 4 : 0;
constexpr int kQkSkew = M3_CP_ROWS8 >= 2 ? 8 : M3_CP_ROWS8 ? 4 : 0;
constexpr int kVySkew = M3_CP_ROWS8 ? 4 : 0;
// Where row r (and element (r, c) of a q/k tile) starts in the tiles. Without M3_CP_ROWS8 the
// plain expressions as macros: as inlined functions they compiled to other SASS (v103's forward).
#if M3_CP_ROWS8
M3_DEV int qk_row(int r) { return r * LDQK + row_skew(r, kQkSkew); }
M3_DEV int qk_at(int r, int c) { return qk_row(r) + (c ^ ((r & 1) * kQkFlip)); }
M3_DEV int vy_row(int r) { return r * LDVY + row_skew(r, kVySkew); }
#define M3_ROW_SKEW(r, skew) + row_skew(r, skew)
#define M3_QK_AT(r, c) qk_at(r, c)
#define M3_QK_ROW(r) qk_row(r)
#define M3_VY_ROW(r) vy_row(r)
#define M3_SKEW_PARAM , int skew
#define M3_SKEW_ARG(skew) , skew
#else
#define M3_ROW_SKEW(r, skew)
#define M3_QK_AT(r, c) ((r) * LDN + (c))
#define M3_QK_ROW(r) ((r) * LDN)
#define M3_VY_ROW(r) ((r) * LDP)
#define M3_SKEW_PARAM
#define M3_SKEW_ARG(skew)
#endif
// M3_CP_SMEM_STATE (v142): the backward copies the forward's entering state into the t1 and t2
// tiles (idle until dqr is stored) as it starts, by cp.async, instead of reading it from L2 twice
// where it is used (the update's da, dqr's inter part; run 101: about a tenth of the backward's
// stall samples wait on those loads). Rows of 128 floats, 16-byte chunk q of row r at q ^ 2 (r % 4):
// lanes (g, t) reading (k0 + t, 8 j + g) as dqr's operand, and the update's 8-byte pairs, meet 32
// banks.
#ifndef M3_CP_SMEM_STATE
#define M3_CP_SMEM_STATE 0
#endif
#ifndef M3_CP_EARLY_DSTATE
#define M3_CP_EARLY_DSTATE 0
#endif
// M3_CP_DS_L1 (v152): the successor's state gradient read through L1 (plain loads) instead of
// around it (__ldcg). The two state products read each of its words twice, once per warp row
// (MmaTile lays warps 2 x 4), back to back; through L1 the second read can hit. No line of a slot's
// gradient can sit stale in an L1: a slot is read by one job only, after its flag's acquire and the
// barrier behind it, and every grid starts with L1 empty of global lines. Run 108: L1 hits doubled,
// the backward's time within the noise.
#ifndef M3_CP_DS_L1
#define M3_CP_DS_L1 0
#endif
// M3_CP_ROWS8_MXT (v148): the m and x tiles (C x C) and the t1 and t2 tiles
// (C x N) take v138's rows too: m and x are read transposed (lanes (g, t) at row k0 + t, column
// 8 j + g) as the dv and dks intra products' operands, and t1 and t2 are stored at the accumulators'
// places, as 8-byte pairs here (half-warps on 32 banks at rows 8 (mod 32) apart).
#ifndef M3_CP_ROWS8_MXT
#define M3_CP_ROWS8_MXT 0
#endif
#if M3_CP_ROWS8_MXT && !M3_CP_ROWS8
#error "M3_CP_ROWS8_MXT extends M3_CP_ROWS8"
#endif
constexpr int LDMX = M3_CP_ROWS8_MXT ? C + 8 : LDC;
constexpr int LDT = M3_CP_ROWS8_MXT ? N + 8 : LDN;
constexpr int kMxSkew = M3_CP_ROWS8_MXT ? 4 : 0, kTSkew = kMxSkew;
#if M3_CP_ROWS8_MXT
#define M3_MX_ROW(r) ((r) * LDMX + row_skew(r, kMxSkew))
#define M3_T_ROW(r) ((r) * LDT + row_skew(r, kTSkew))
#else
#define M3_MX_ROW(r) ((r) * LDC)
#define M3_T_ROW(r) ((r) * LDN)
#endif
#if M3_CP_SMEM_STATE
#define M3_SS(r, c) ((r) * N + ((((c) >> 2) ^ (((r) & 3) << 1)) << 2) + ((c) & 3))
#endif
// M3_CP_SWIZZLE_FOLD (v183): the readers of the state's copy whose rows have a fixed (r & 3) per
// thread (the inter product of dqr, k = k0 + t or k0 + t + 4, k0 % 8 == 0; the update's rows
// m0 + 16 i + g + 8 h, m0 % 4 == 0) and whose columns are n0 + 8 j + q (n0 % 32 == 0, j < 4,
// q < 8) see M3_SS's swizzle as the n-tile permutation j -> j ^ (r & 3): the same word at
// r N + n0 + 8 (j ^ (r & 3)) + q. Run 130 put the inter product's operand line at 4.1% of the
// backward's executed instructions: its SASS rebuilds M3_SS's shifts and XORs for each of the 64
// loads (171 integer instructions a thread), as nothing tells ptxas that c's low bits are g's.
#ifndef M3_CP_SWIZZLE_FOLD
#define M3_CP_SWIZZLE_FOLD 0
#endif
#if M3_CP_SWIZZLE_FOLD && !M3_CP_SMEM_STATE
#error "M3_CP_SWIZZLE_FOLD reads the state's swizzled copy (M3_CP_SMEM_STATE)"
#endif
// M3_CP_INTER_PARKED (v192): dqr's inter product (dy times the entering state) is parked raw in
// t1 once the state's copy is read, and the intra product added to it there, instead of both
// tiles' accumulators living in registers through the intra product. Run 130's profile of v173
// had most of the backward's executed spills (local loads and stores) on those two products'
// lines, and run 137 found the spills, not the instruction count, setting the backward's time
// (MIO-throttle stalls). The same fmaf(e, inter, intra) per element: meant bitwise.
#ifndef M3_CP_INTER_PARKED
#define M3_CP_INTER_PARKED 0
#endif
// The column of M3_SS(r, n0 + 8 j + q) within row r, for r & 3 == rq (conditions above).
M3_DEV int ss_tile_col(int n0, int j, int q, int rq) { return n0 + 8 * (j ^ rq) + q; }
constexpr int LDA = A + (M3_CP_CONFLICT_FREE ? 1 : 0);  // the angle tiles' row stride
// Where element e = t * A + i of an angle tile sits (t = e / A); unpadded, e itself, so that the
// variants before v25 compile to the code they were measured with.
M3_DEV int angle_index(int e, int t) { return LDA == A ? e : t * LDA + e % A; }
constexpr int NPAIR = N / 2;
constexpr M3ScanLayout L =
    m3_layout(C, N, P, A, NT, M3_PAD, false, M3_CP_GLOBAL_STATES, LDA - A, M3_CP_ROWS8, M3_CP_ROWS8_MXT);
constexpr M3ScanLayout LF =
    m3_layout(C, N, P, A, NT, M3_PAD, true, M3_CP_FWD_GLOBAL_STATE, LDA - A, M3_CP_ROWS8, M3_CP_ROWS8_MXT);

// TM x TN is the per-thread block of the CUDA-core tile; the tensor-core tile lays warps out itself.
#if M3_USE_MMA
template <int M, int NC, int TM, int TN>
using Tile = MmaTile<M, NC, NT>;
#else
template <int M, int NC, int TM, int TN>
using Tile = RegTile<M, NC, TM, TN, NT>;
#endif

#ifndef M3_LDMATRIX
#define M3_LDMATRIX 0
#endif
// M3_CP_HEAD_CLUSTERS (v53): the backward runs as clusters of CTAs, one per head of a group of
// heads of the same chunk; each CTA leaves its per-token dq and dk rows in shared memory (the t2
// and kr tiles, dead after the epilogue) and the cluster sums them over its heads through
// distributed shared memory (m3_chunk_parallel.cuh), so the per-head partials the backward writes
// and m3_reduce_heads reads shrink by the cluster size.
#ifndef M3_CP_HEAD_CLUSTERS
#define M3_CP_HEAD_CLUSTERS 0
#endif
// M3_CP_BACKWARD64Q (v121): m3_cp_backward64q (m3_backward64q.cuh), launched before the backward,
// has written every token's per-head dq and the dq half of every chunk's bias partials; the
// backward leaves both alone.
#ifndef M3_CP_BACKWARD64Q
#define M3_CP_BACKWARD64Q 0
#endif
// M3_CP_BACKWARD64KV (v123): likewise m3_cp_backward64kv (m3_backward64kv.cuh) has written every
// token's per-head dk, the dk half of every chunk's bias partials and dv.
#ifndef M3_CP_BACKWARD64KV
#define M3_CP_BACKWARD64KV 0
#endif
#if M3_LDMATRIX && (!M3_USE_MMA || M3_SPLIT_TF32)
#error "M3_LDMATRIX feeds the plain tf32 tensor-core products"
#endif
// An operand read from a padded shared tile: A(r, k) = tile[r * ld + k], or B(k, c) =
// tile[c * ld + k]. Under M3_LDMATRIX the fragments come by ldmatrix, else by one 4-byte load
// per element (the same bits either way): M3_LDMATRIX=1 (v41) in every such product,
// M3_LDMATRIX=2 (v43) only in the backward kernel's (backward_intra's and its build_mixing), where
// v41 gained, while its forward lost (run 39). M3_ROWS_* are the backward's, M3_SHARED_ROWS_* the
// forward's.
// The *S forms take the tile's row skew and odd-row flip as well (M3_QK_AT).
#define M3_SCALAR_ROWS_A(tile, ld) [&](int r, int k) { return (tile)[r * (ld) + k]; }
#define M3_SCALAR_ROWS_B(tile, ld) [&](int k, int c) { return (tile)[c * (ld) + k]; }
#if M3_CP_ROWS8
#define M3_SCALAR_ROWS_AS(tile, ld, skew, flip) \
  [&](int r, int k) { return (tile)[r * (ld) + row_skew(r, skew) + (k ^ ((r & 1) * (flip)))]; }
#define M3_SCALAR_ROWS_BS(tile, ld, skew, flip) \
  [&](int k, int c) { return (tile)[c * (ld) + row_skew(c, skew) + (k ^ ((c & 1) * (flip)))]; }
#else
#define M3_SCALAR_ROWS_AS(tile, ld, skew, flip) M3_SCALAR_ROWS_A(tile, ld)
#define M3_SCALAR_ROWS_BS(tile, ld, skew, flip) M3_SCALAR_ROWS_B(tile, ld)
#endif
#if M3_LDMATRIX
#define M3_ROWS_A(tile, ld) (SmemRowsA{(tile), (ld)})
#define M3_ROWS_B(tile, ld) (SmemRowsB{(tile), (ld)})
#if M3_CP_ROWS8
#define M3_ROWS_AS(tile, ld, skew, flip) (SmemRowsA{(tile), (ld), (skew), (flip)})
#define M3_ROWS_BS(tile, ld, skew, flip) (SmemRowsB{(tile), (ld), (skew), (flip)})
#else
#define M3_ROWS_AS(tile, ld, skew, flip) M3_ROWS_A(tile, ld)
#define M3_ROWS_BS(tile, ld, skew, flip) M3_ROWS_B(tile, ld)
#endif
#else
#define M3_ROWS_A M3_SCALAR_ROWS_A
#define M3_ROWS_B M3_SCALAR_ROWS_B
#define M3_ROWS_AS M3_SCALAR_ROWS_AS
#define M3_ROWS_BS M3_SCALAR_ROWS_BS
#endif
#if M3_LDMATRIX == 1
#define M3_SHARED_ROWS_A M3_ROWS_A
#define M3_SHARED_ROWS_B M3_ROWS_B
#define M3_SHARED_ROWS_AS M3_ROWS_AS
#define M3_SHARED_ROWS_BS M3_ROWS_BS
#else
#define M3_SHARED_ROWS_A M3_SCALAR_ROWS_A
#define M3_SHARED_ROWS_B M3_SCALAR_ROWS_B
#define M3_SHARED_ROWS_AS M3_SCALAR_ROWS_AS
#define M3_SHARED_ROWS_BS M3_SCALAR_ROWS_BS
#endif
#if M3_CP_ROWS8 && (M3_CP_FWD_GLOBAL_STATE == 2 || M3_CP_HEAD_CLUSTERS || M3_CP_PREFETCH || !M3_VECTOR_IO || \
                    M3_CP_QUAD_COLUMNS || !M3_CP_ROW_PAIRED_LANES || !M3_CP_SWIZZLED_HALVES)
#error "M3_CP_ROWS8 is wired into v135's paths only"
#endif

static_assert(C % 32 == 0 && C <= 64, "chunk must be 32 or 64");
static_assert(N % 64 == 0 && 2 * A <= N && A <= 32, "head dims out of the supported family");
static_assert(NT == 256, "tiles are laid out for 256 threads");

// Bias-gradient partial sums each thread keeps across the backward walk.
#if M3_VECTOR_IO
constexpr int kBiasRegs = 8;
static_assert(M3_PAD % 4 == 0 && N % 8 == 0 && P % 8 == 0, "vector I/O needs 16-byte aligned rows");
#else
constexpr int kBiasRegs = 2 * (NPAIR / 32);
#endif

#if M3_VECTOR_IO
// Staging from global memory issues every load of a thread before its first shared-memory store:
// the kernel parameters are generic pointers, so the compiler may not move a load above a store
// itself, and one CTA per SM cannot hide a load latency per element.
M3_DEV uint4 ldg16(const void* ptr) { return *reinterpret_cast<const uint4*>(ptr); }

M3_DEV void unpack_bf16x8(const uint4& u, float (&f)[8]) {
  const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    f[2 * j] = __uint_as_float(w[j] << 16);
    f[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
  }
}

M3_DEV void load_f32x8(const float* src, float (&f)[8]) {
  const float4 lo = *reinterpret_cast<const float4*>(src);
  const float4 hi = *reinterpret_cast<const float4*>(src + 4);
  f[0] = lo.x; f[1] = lo.y; f[2] = lo.z; f[3] = lo.w;
  f[4] = hi.x; f[5] = hi.y; f[6] = hi.z; f[7] = hi.w;
}

M3_DEV void store_f32x8(float* dst, const float (&f)[8]) {
  *reinterpret_cast<float4*>(dst) = make_float4(f[0], f[1], f[2], f[3]);
  *reinterpret_cast<float4*>(dst + 4) = make_float4(f[4], f[5], f[6], f[7]);
}

#if M3_CP_HALF_PARTIALS
// v254: one octet of a per-head dq or dk row (row = token * H + head, of N columns) into the
// partials in half, the row's 16 octets held by the 16 lanes of a half-warp (`tid & 16` tells which):
// their maximum sets the row's power of two (half_block_scale), whose inverse goes to float
// rows * N / 2 + row, after the halves. The whole half-warp calls it, or none of it.
M3_DEV void store_half_octet(float* ws, long long rows, long long row, int o, int tid, const float (&f)[8]) {
  float m = 0.f;
#pragma unroll
  for (int j = 0; j < 8; ++j) m = fmaxf(m, fabsf(f[j]));
  const unsigned group = 0xffffu << (tid & 16);
#pragma unroll
  for (int off = 8; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(group, m, off));
  float scale, inverse;
  half_block_scale(m, scale, inverse);
  unsigned* halves = reinterpret_cast<unsigned*>(ws);
  *reinterpret_cast<uint4*>(halves + (row * N + 8 * o) / 2) =
      make_uint4(f2h_pair(scale * f[0], scale * f[1]), f2h_pair(scale * f[2], scale * f[3]),
                 f2h_pair(scale * f[4], scale * f[5]), f2h_pair(scale * f[6], scale * f[7]));
  if (o == 0) ws[rows * N / 2 + row] = inverse;
}
#endif

#if M3_CP_SWIZZLED_HALVES
// Eight consecutive octets o of a shared row (a quarter-warp's 16-byte accesses) start 32 bytes
// apart, so each of store_f32x8's two accesses puts octets o and o + 4 on the same four banks:
// every such access was two wavefronts (a fifth of the backward's excess shared wavefronts in run
// 50). Octets with bit 2 of o set take their high half first, which spreads the eight over all
// 32 banks (M3_CP_SWIZZLED_HALVES, v71: the staged input rows and the epilogue's reads of dqr,
// dks, kr and qr). Same values at the same addresses.
M3_DEV void store_f32x8_halves(float* dst, const float (&f)[8], int o) {
  const int h = (o >> 2) & 1;
  const float4 lo = make_float4(f[0], f[1], f[2], f[3]), hi = make_float4(f[4], f[5], f[6], f[7]);
  *reinterpret_cast<float4*>(dst + 4 * h) = h ? hi : lo;
  *reinterpret_cast<float4*>(dst + 4 - 4 * h) = h ? lo : hi;
}
M3_DEV void load_f32x8_halves(const float* src, float (&f)[8], int o) {
  const int h = (o >> 2) & 1;
  const float4 first = *reinterpret_cast<const float4*>(src + 4 * h);
  const float4 second = *reinterpret_cast<const float4*>(src + 4 - 4 * h);
  const float4 lo = h ? second : first, hi = h ? first : second;
  f[0] = lo.x; f[1] = lo.y; f[2] = lo.z; f[3] = lo.w;
  f[4] = hi.x; f[5] = hi.y; f[6] = hi.z; f[7] = hi.w;
}
#define M3_STORE_F32X8_SHARED(dst, f, o) store_f32x8_halves(dst, f, o)
#define M3_LOAD_F32X8_SHARED(src, f, o) load_f32x8_halves(src, f, o)
#else
#define M3_STORE_F32X8_SHARED(dst, f, o) store_f32x8(dst, f)
#define M3_LOAD_F32X8_SHARED(src, f, o) load_f32x8(src, f)
#endif

// Octet o (columns 8 o to 8 o + 7) of row r of a q/k tile. Stored as store_f32x8 does, where the
// tile flips odd rows' halves (M3_CP_ROWS8=2) with the low half at the flipped place.
M3_DEV void store_qk_octet(float* tile, int r, int o, const float (&f)[8]) {
#if M3_CP_ROWS8
  const int x = (r & 1) * kQkFlip;
  float* row = tile + M3_QK_ROW(r);
  *reinterpret_cast<float4*>(row + ((8 * o) ^ x)) = make_float4(f[0], f[1], f[2], f[3]);
  *reinterpret_cast<float4*>(row + ((8 * o + 4) ^ x)) = make_float4(f[4], f[5], f[6], f[7]);
#else
  store_f32x8(tile + r * LDN + 8 * o, f);
#endif
}
// Read as M3_LOAD_F32X8_SHARED does: the half at the lower place first unless bit 2 of o is set
// (one row's eight octets per quarter-warp then meet 32 banks); a flipped row's lower place holds
// its high half.
M3_DEV void load_qk_octet(const float* tile, int r, int o, float (&f)[8]) {
#if M3_CP_ROWS8 >= 2
  const int h = (o >> 2) & 1, swapped = h ^ (r & 1);
  const float* src = tile + M3_QK_ROW(r) + 8 * o;
  const float4 first = *reinterpret_cast<const float4*>(src + 4 * h);
  const float4 second = *reinterpret_cast<const float4*>(src + 4 - 4 * h);
  const float4 lo = swapped ? second : first, hi = swapped ? first : second;
  f[0] = lo.x; f[1] = lo.y; f[2] = lo.z; f[3] = lo.w;
  f[4] = hi.x; f[5] = hi.y; f[6] = hi.z; f[7] = hi.w;
#else
  M3_LOAD_F32X8_SHARED(tile + M3_QK_ROW(r) + 8 * o, f, o);
#endif
}

// rows x COLS bf16 values, rows `row_stride` elements apart in `a` (and in `b` when given), into
// shared floats combine(a, b); rows at or past `valid` become zero.
template <int ROWS, int COLS, class Combine>
M3_DEV void stage_bf16_rows(const m3_bf16* a, const m3_bf16* b, long long row_stride, int valid, float* dst,
                            int ld M3_SKEW_PARAM, Combine combine) {
  constexpr int OCT = COLS / 8, TOTAL = ROWS * OCT, ITERS = (TOTAL + NT - 1) / NT;
  uint4 ua[ITERS], ub[ITERS];
#pragma unroll
  for (int it = 0; it < ITERS; ++it) {
    const int e = M3_TID() + it * NT, r = e / OCT, o = e % OCT;
    const bool live = e < TOTAL && r < valid;
    ua[it] = live ? ldg16(a + r * row_stride + 8 * o) : make_uint4(0u, 0u, 0u, 0u);
    ub[it] = (live && b) ? ldg16(b + r * row_stride + 8 * o) : make_uint4(0u, 0u, 0u, 0u);
  }
#pragma unroll
  for (int it = 0; it < ITERS; ++it) {
    const int e = M3_TID() + it * NT, r = e / OCT, o = e % OCT;
    if (e >= TOTAL) continue;
    float fa[8], fb[8], out[8];
    unpack_bf16x8(ua[it], fa);
    unpack_bf16x8(ub[it], fb);
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = r < valid ? combine(fa[j], fb[j]) : 0.f;
    M3_STORE_F32X8_SHARED(dst + r * ld M3_ROW_SKEW(r, skew) + 8 * o, out, o);
  }
}

// A P x N fp32 state from global memory into padded shared rows.
// kFromL2: read with ld.global.cg, past L1, for a state another CTA of the same kernel just
// published (an L1 line could be stale).
template <bool kFromL2 = false>
M3_DEV void stage_state(const float* src, float* dst) {
  constexpr int QUADS = P * N / 4, ITERS = QUADS / NT;
  static_assert(ITERS * NT == QUADS, "state must split evenly over the block");
  const float4* from = reinterpret_cast<const float4*>(src);
  float4 u[ITERS];
#pragma unroll
  for (int it = 0; it < ITERS; ++it) u[it] = kFromL2 ? __ldcg(from + M3_TID() + it * NT) : from[M3_TID() + it * NT];
#pragma unroll
  for (int it = 0; it < ITERS; ++it) {
    const int e = 4 * (M3_TID() + it * NT);
    *reinterpret_cast<float4*>(dst + (e / N) * LDN + (e % N)) = u[it];
  }
}

#if M3_CP_FRAG_STATES
// A P x N state in fragment order (frag_word), just published by another CTA (read from L2), into
// row-major padded shared rows. A warp's load covers 8 rows x 64 bytes (whole sectors); its four
// scattered stores hit 32 banks each with LDN = 4 (mod 32): row r_lo adds 4 r_lo, the word's
// columns g + 8 i add g.
M3_DEV void stage_state_frag(const float* src, float* dst) {
  constexpr int ITERS = P * N / 4 / NT, ROW_GROUPS = P / 8, BLOCKS = N / 32;
  static_assert(ITERS * NT * 4 == P * N && ROW_GROUPS * BLOCKS * 2 == NW * ITERS, "state must split evenly");
  static_assert(LDN % 32 == 4, "the store pattern is conflict-free for LDN = 4 (mod 32)");
  const int lane = M3_TID() & 31, warp = M3_TID() >> 5;
  const auto place = [&](int it, int& r, int& b, int& g) {
    const int c = warp + NW * it;
    r = 8 * (c % ROW_GROUPS) + (lane & 7);
    b = (c / ROW_GROUPS) % BLOCKS;
    g = 4 * (c / (ROW_GROUPS * BLOCKS)) + (lane >> 3);
  };
  float4 u[ITERS];
#pragma unroll
  for (int it = 0; it < ITERS; ++it) {
    int r, b, g;
    place(it, r, b, g);
    u[it] = __ldcg(reinterpret_cast<const float4*>(src + r * N + 32 * b + 4 * frag_word(g)));
  }
#pragma unroll
  for (int it = 0; it < ITERS; ++it) {
    int r, b, g;
    place(it, r, b, g);
    float* row = dst + r * LDN + 32 * b + g;
#pragma unroll
    for (int i = 0; i < 4; ++i) row[8 * i] = quad_at(u[it], i);
  }
}
#endif
#endif

// M3_CP_ZERO_DS (v186): where a chunk's leaving state has no gradient (a sequence's last chunk
// without dfinal_ssm) gds points at a zero tile of the module instead of being nullptr, so the
// gradient's loads need no null test: run 130's busiest backward line after the mma was that
// load, whose SASS zeroes every destination register (CS2R) and predicates each of its 40 loads
// on the test. Loaded zeros are +0.0, the value the test gave: bitwise the same results. The
// zero tile is never written (a __device__ array, zero from the module's load on); no discard
// reaches it (the successor's gradient is dropped from L2 only where it exists).
#ifndef M3_CP_ZERO_DS
#define M3_CP_ZERO_DS 0
#endif
#if M3_CP_ZERO_DS
#define M3_DS_GIVEN(ptr) true
__device__ float4 m3_zero_dstate[P * N / 4];
M3_DEV const float* no_dstate() { return reinterpret_cast<const float*>(m3_zero_dstate); }
#else
#define M3_DS_GIVEN(ptr) (ptr)
M3_DEV const float* no_dstate() { return nullptr; }
#endif

struct Smem {
  float* qr;
  float* kr;
  float* v;
  float* dy;
  float* st;
  float* ds;
  float* m;
  float* x;
  float* t1;
  float* t2;
  float* phi;
  float* th;
  float* dphi;
  float* vec;
  float* red;
  const m3_bf16* raw;  // M3_CP_PREFETCH: the chunk's raw input rows (RawTiles); else nullptr
  // M3_CP_GLOBAL_STATES: the entering state and the gradient of the leaving one, P x N rows in
  // global memory; nullptr is zero (gds under M3_CP_ZERO_DS: never nullptr, see there).
  const float* gst;
  const float* gds;
#if M3_CP_OVERLAPPED_BACKWARD
  // The backward runs beside the forward's last jobs (v109), which still write other chunks'
  // states: the entering state is read through L2, not the read-only path.
#define M3_STATE_LOAD __ldcg
#else
#define M3_STATE_LOAD __ldg
#endif
#if M3_CP_GLOBAL_STATES
  M3_DEV float st_at(int r, int c) const { return gst ? M3_STATE_LOAD(gst + r * N + c) : 0.f; }
  // Published by another CTA of this kernel: read from L2, never from a stale L1 line.
  M3_DEV float ds_at(int r, int c) const { return M3_DS_GIVEN(gds) ? __ldcg(gds + r * N + c) : 0.f; }
#endif
#if M3_FRAG_DS
  // The 16-byte words at row r, position pos of the states in fragment order (frag_word).
  M3_DEV float4 st4(int r, int pos) const {
    return gst ? M3_STATE_LOAD(reinterpret_cast<const float4*>(gst + r * N + pos)) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  M3_DEV float4 ds4(int r, int pos) const {
#if M3_CP_DS_L1
    return M3_DS_GIVEN(gds) ? *reinterpret_cast<const float4*>(gds + r * N + pos) : make_float4(0.f, 0.f, 0.f, 0.f);
#else
    return M3_DS_GIVEN(gds) ? __ldcg(reinterpret_cast<const float4*>(gds + r * N + pos))
                            : make_float4(0.f, 0.f, 0.f, 0.f);
#endif
  }
  // The forward's entering state, published by another CTA of the same kernel: from L2 as well.
  M3_DEV float4 st4_published(int r, int pos) const {
    return gst ? __ldcg(reinterpret_cast<const float4*>(gst + r * N + pos)) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
#endif
  M3_DEV float* vv(int which) { return vec + which * C; }
  M3_DEV float* phi_carry() { return vec + kVecCount * C; }
  M3_DEV float* big_phi_carry() { return vec + kVecCount * C + A; }
  M3_DEV float* scalars() { return vec + kVecCount * C + 2 * A; }
};

// Pointers into shared memory for a layout; the tiles it leaves out (-1) stay null.
M3_DEV Smem carve_layout(float* base, const M3ScanLayout& l) {
  const auto at = [&](int offset) { return offset < 0 ? nullptr : base + offset; };
  Smem s;
  s.qr = at(l.qr);
  s.kr = at(l.kr);
  s.v = at(l.v);
  s.dy = at(l.dy);
  s.st = at(l.st);
  s.ds = at(l.ds);
  s.m = at(l.m);
  s.x = at(l.x);
  s.t1 = at(l.t1);
  s.t2 = at(l.t2);
  s.phi = at(l.phi);
  s.th = at(l.th);
  s.dphi = at(l.dphi);
  s.vec = at(l.vec);
  s.red = at(l.red);
  s.raw = nullptr;
  s.gst = nullptr;
  s.gds = no_dstate();
  return s;
}


M3_DEV Smem carve(float* base) { return carve_layout(base, L); }

// The forward's share (m3_layout with forward_only): no state-gradient, dM, dks or dphi tiles,
// and t1 only C x P.
M3_DEV Smem carve_forward(float* base) { return carve_layout(base, LF); }

// Where one (sequence, head) lives.
struct SeqHead {
  int h;
  int seq;
  int start;        // first token in the packed layout
  int len;          // tokens in the sequence
  int chunk_base;   // index of its first chunk among all chunks of all sequences
};

M3_DEV SeqHead locate(const M3Params& p) {
  SeqHead sh;
  sh.h = blockIdx.x;
  sh.seq = blockIdx.y;
  sh.start = p.cu_seqlens[sh.seq];
  sh.len = p.cu_seqlens[sh.seq + 1] - sh.start;
  // The host checks the boundaries except under graph capture; reading past the inputs would be
  // silent garbage, so a bad boundary stops the kernel with an error instead.
  if (sh.start < 0 || sh.len < 0 || sh.start + sh.len > p.T) __trap();
  int base = 0;
#if M3_SEQ_BUCKET > 0
#pragma unroll
  for (int i = 0; i < M3_SEQ_BUCKET; ++i) {
    if (i < sh.seq) base += (p.cu_seqlens[i + 1] - p.cu_seqlens[i] + C - 1) / C;
  }
#else
  for (int i = 0; i < sh.seq; ++i) base += (p.cu_seqlens[i + 1] - p.cu_seqlens[i] + C - 1) / C;
#endif
  sh.chunk_base = base;
  return sh;
}

M3_DEV void cp_async16(void* smem, const void* gmem) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(gmem) : "memory");
}

#if M3_CP_PREFETCH
// Where the raw bf16 rows of a chunk lie in the prefetch area, packed (row strides N, P and A).
struct RawTiles {
  static constexpr int kQ = 0, kK = C * N, kV = 2 * C * N, kZ = kV + C * P, kDout = kZ + C * P,
                       kAngles = kDout + C * P, kTotal = kAngles + C * A;
};
static_assert(RawTiles::kTotal / 2 <= P * (N + M3_PAD), "the raw rows must fit in a state tile");

// `rows` rows of COLS bf16 (16-byte pieces) from `src` (rows `stride` elements apart) into packed
// rows at `dst`; rows at or past `rows` are not requested (their consumers read zeros instead).
template <int COLS>
M3_DEV void prefetch_rows(m3_bf16* dst, const m3_bf16* src, long long stride, int rows) {
  constexpr int OCT = COLS / 8;
  for (int e = M3_TID(); e < C * OCT; e += NT) {
    const int r = e / OCT, o = e % OCT;
    if (r < rows) cp_async16(dst + r * COLS + 8 * o, src + r * stride + 8 * o);
  }
}

// Requests every input tile of chunk [a, a + len) into `area` (an idle tile of at least
// RawTiles::kTotal bf16), and the P x N state at `state` (nullptr: none) straight into s.st.
// dout is requested only with `want_dout` and where there is one.
M3_DEV void prefetch_chunk(const M3Params& p, const SeqHead& sh, Smem& s, float* area, int a, int len,
                           bool want_dout, const float* state) {
  m3_bf16* raw = reinterpret_cast<m3_bf16*>(area);
  const long long t0 = sh.start + a;
  const long long H = p.H;
  prefetch_rows<N>(raw + RawTiles::kQ, p.q + t0 * N, N, len);
  prefetch_rows<N>(raw + RawTiles::kK, p.k + t0 * N, N, len);
  prefetch_rows<P>(raw + RawTiles::kV, p.v + (t0 * H + sh.h) * P, H * P, len);
  prefetch_rows<A>(raw + RawTiles::kAngles, p.angles + (t0 * H + sh.h) * A, H * A, len);
  prefetch_rows<P>(raw + RawTiles::kZ, p.z + (t0 * H + sh.h) * P, H * P, len);
  if (want_dout && p.dout) prefetch_rows<P>(raw + RawTiles::kDout, p.dout + (t0 * H + sh.h) * P, H * P, len);
  if (state) {
    constexpr int QUADS = P * N / 4;
    for (int e = M3_TID(); e < QUADS; e += NT) {
      cp_async16(s.st + (4 * e / N) * LDN + (4 * e % N), state + 4 * e);
    }
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
  s.raw = raw;
}
#endif

// M3_CP_EARLY_LOADS (v91): the forward's load_chunk requests a thread's q and k octets, the
// head's bias octets and its angle elements first, before the per-token scalars' loads and the
// three barriers of the scalar phases, so that those round trips overlap instead of following one
// another (scalars, then angles, then q/k: three in a row before). The registers that hold them
// live only until the staging; the backward, at its 128-register limit, keeps the old order.
// M3_CP_EARLY_LOADS=2 (v93) requests the head's v, z and dout rows there too: they were three
// more round trips in a row, v at load_chunk's end and z, dout after it (their unpacking, waiting
// on them, held 11% of the forward's stall samples on c01 in run 65). M3_CP_EARLY_LOADS=3 (v95)
// does the same in the backward, whose dout and z rows (combined into dy) follow load_chunk too.
#ifndef M3_CP_EARLY_LOADS
#define M3_CP_EARLY_LOADS 0
#endif
#if M3_CP_EARLY_LOADS && !(M3_VECTOR_IO && M3_STAGE_ALL && M3_PARALLEL_SCALARS && M3_CP_ROW_PAIRED_LANES) || \
    M3_CP_EARLY_LOADS && M3_CP_PREFETCH
#error "M3_CP_EARLY_LOADS is wired into the row-paired vector staging without M3_CP_PREFETCH"
#endif
#if M3_CP_ROW_PAIRED_LANES
// The q/k staging's lane roles: lane bits 0-1 and 3-4 pick the octet `o`, bit 2 the row `r0` of
// the warp's two. A quarter-warp's 16-byte stores then cover octets 0-3 (or 4-7, ...) of two rows
// LDN = 4 (mod 32) floats apart, 32 distinct banks, where sixteen lanes of one row put octets o
// and o + 4 on the same banks.
M3_DEV void row_paired_octet(int tid, int& o, int& r0) {
  const int lane16 = tid & 31;
  o = (lane16 & 3) | ((lane16 >> 3) << 2);
  r0 = 2 * (tid >> 5) + ((lane16 >> 2) & 1);
}
#endif

// M3_CP_ANGLE_QUADS (v180): a thread's four angle elements of a chunk are four adjacent angle
// indices of one token (elements 4 tid .. 4 tid + 3), loaded as one 8-byte word, where they were
// elements tid, tid + NT, ... of four tokens, four 2-byte loads with four 64-bit addresses (run
// 130: those loads about 1% of the backward's executed instructions). Each element's tanh, th
// and phi are computed as before and land in the same shared slots.
#ifndef M3_CP_ANGLE_QUADS
#define M3_CP_ANGLE_QUADS 0
#endif
#if M3_CP_ANGLE_QUADS && !(M3_CP_EARLY_LOADS && M3_STAGE_ALL && M3_PARALLEL_SCALARS && !M3_CP_PREFETCH)
#error "M3_CP_ANGLE_QUADS is wired into the early loads' angle staging"
#endif
// The chunk's angle element a thread's it-th angle register holds (token e / A, index e % A).
M3_DEV int angle_element(int tid, int it) { return M3_CP_ANGLE_QUADS ? 4 * tid + it : tid + it * NT; }

#if M3_CP_EARLY_LOADS
struct EarlyLoads {
  static constexpr int OCT = N / 8, ROWS = NT / OCT, PASSES = C / ROWS, ANGLE_ITERS = C * A / NT;
  uint4 qv[PASSES], kv[PASSES];
  float qb[8], kb[8];
#if M3_CP_ANGLE_QUADS
  static_assert(ANGLE_ITERS == 4 && A % 4 == 0, "four adjacent angle indices a thread");
  uint2 angles4;
#else
  m3_bf16 angles[ANGLE_ITERS];
#endif
#if M3_CP_EARLY_LOADS >= 2
  // One 16-byte word of each C x P bf16 tile per thread: row tid / 8, octet tid % 8, as
  // stage_bf16_rows<C, P> takes them; zero where it would load nothing.
  static_assert(C * P / 8 == NT, "one word of each C x P tile per thread");
  uint4 v, z, dout;
#endif
  // The same addresses and lane roles as load_chunk's staging below.
  // dout only where dz is computed: never in a forward-only call, always when the backward runs.
  M3_DEV void issue(const M3Params& p, const SeqHead& sh, int a, int len) {
    const int tid = M3_TID();
    int o, r0;
    row_paired_octet(tid, o, r0);
    const long long H = p.H;
#pragma unroll
    for (int ps = 0; ps < PASSES; ++ps) {
      const int t = ps * ROWS + r0;
      const long long tg = sh.start + a + t;
      qv[ps] = t < len ? ldg16(p.q + tg * N + 8 * o) : make_uint4(0u, 0u, 0u, 0u);
      kv[ps] = t < len ? ldg16(p.k + tg * N + 8 * o) : make_uint4(0u, 0u, 0u, 0u);
    }
    load_f32x8(p.q_bias + sh.h * N + 8 * o, qb);
    load_f32x8(p.k_bias + sh.h * N + 8 * o, kb);
#if M3_CP_ANGLE_QUADS
    {
      // The inputs are 16-byte aligned and A % 4 == 0: the four elements are one aligned 8-byte word.
      const int e = angle_element(tid, 0), t = e / A, i = e % A;
      angles4 = t < len ? *reinterpret_cast<const uint2*>(
                              p.angles + (static_cast<long long>(sh.start + a + t) * H + sh.h) * A + i)
                        : make_uint2(0u, 0u);
    }
#else
#pragma unroll
    for (int it = 0; it < ANGLE_ITERS; ++it) {
      const int e = tid + it * NT, t = e / A, i = e % A;
      angles[it] = t < len ? p.angles[(static_cast<long long>(sh.start + a + t) * H + sh.h) * A + i]
                           : static_cast<m3_bf16>(0);
    }
#endif
#if M3_CP_EARLY_LOADS >= 2
    const int r = tid / (P / 8), ov = tid % (P / 8);
    const long long word = (static_cast<long long>(sh.start + a + r) * H + sh.h) * P + 8 * ov;
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    v = r < len ? ldg16(p.v + word) : zero;
    z = r < len ? ldg16(p.z + word) : zero;
    dout = r < len && p.dz && p.dout ? ldg16(p.dout + word) : zero;
#endif
  }
};

#if M3_CP_EARLY_LOADS >= 2
// The second half of stage_bf16_rows<C, P> for words loaded earlier (`wb` only for a combine that
// reads it).
template <class Combine>
M3_DEV void store_bf16_words(uint4 wa, uint4 wb, int valid, float* dst, int ld M3_SKEW_PARAM, Combine combine) {
  const int r = M3_TID() / (P / 8), o = M3_TID() % (P / 8);
  float fa[8], fb[8], out[8];
  unpack_bf16x8(wa, fa);
  unpack_bf16x8(wb, fb);
#pragma unroll
  for (int j = 0; j < 8; ++j) out[j] = r < valid ? combine(fa[j], fb[j]) : 0.f;
  M3_STORE_F32X8_SHARED(dst + r * ld M3_ROW_SKEW(r, skew) + 8 * o, out, o);
}
#endif
#endif

// Loads one chunk and rebuilds everything per token that both walks need: the decays, the
// trapezoid weights, the angles and the rotated, biased q and k rows of this head.
// `early` (M3_CP_EARLY_LOADS only, null in the backward): the loads EarlyLoads::issue made. (Not a
// template parameter: as a template the backward's and the other variants' SASS changed.)
#if M3_CP_EARLY_LOADS
#define M3_EARLY_LOADS_PARAM , const EarlyLoads* early = nullptr
#else
#define M3_EARLY_LOADS_PARAM
#endif
M3_DEV void load_chunk(const M3Params& p, const SeqHead& sh, Smem& s, int a, int len M3_EARLY_LOADS_PARAM) {
  const int tid = M3_TID();
  const int H = p.H;
  const int T = p.T;
  (void)H;  // every use may come from the prefetch (M3_CP_PREFETCH)
  if (tid < C) {
    const int t = tid;
    float adt = 0.f, dt = 0.f, pt = 0.f, gam = 0.f;
    if (t < len) {
      const int tg = sh.start + a + t;
      adt = p.adt[sh.h * T + tg];
      dt = p.dt[sh.h * T + tg];
      pt = sigmoidf(bf2f(p.trap[sh.h * T + tg]));
      if (a + t + 1 < sh.len) {
#if M3_CP_TRIMS
        // The backward's tail needs the next chunk's first trap and dt again.
        const float dt_next = p.dt[sh.h * T + tg + 1];
        const float p_next = sigmoidf(bf2f(p.trap[sh.h * T + tg + 1]));
        gam = dt_next * (1.f - p_next);
        if (t == len - 1) {
          s.scalars()[kScalarPNext] = p_next;
          s.scalars()[kScalarDtNext] = dt_next;
        }
#else
        gam = p.dt[sh.h * T + tg + 1] * (1.f - sigmoidf(bf2f(p.trap[sh.h * T + tg + 1])));
#endif
      }
    }
    s.vv(kVecDt)[t] = dt;
    s.vv(kVecP)[t] = pt;
    s.vv(kVecGam)[t] = gam;
    s.vv(kVecSc)[t] = dt * pt + gam;
    s.vv(kVecCl)[t] = adt;
  }
#if M3_CP_PREFETCH
  asm volatile("cp.async.wait_all;" ::: "memory");
#endif
  __syncthreads();
  // Chunk-local cumsum of adt: decays are differences of it, so keeping it local keeps them exact.
  if (tid < 32) {
    float carry = 0.f;
#pragma unroll
    for (int base = 0; base < C; base += 32) {
      float x = warp_inclusive_scan(s.vv(kVecCl)[base + tid]) + carry;
      s.vv(kVecCl)[base + tid] = x;
      carry = __shfl_sync(0xffffffffu, x, 31);
    }
  }
#if M3_PARALLEL_SCALARS
  // Angle sums: th * dt for every (token, angle) at once, then one warp scan per angle index.
  const int warp = tid >> 5, lane = tid & 31;
#if M3_STAGE_ALL
  {
    constexpr int ITERS = C * A / NT;
    static_assert(ITERS * NT == C * A, "angles must split evenly over the block");
    m3_bf16 raw[ITERS];
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
      const int e = angle_element(tid, it), t = e / A, i = e % A;
#if M3_CP_PREFETCH
      raw[it] = t < len ? s.raw[RawTiles::kAngles + t * A + i] : static_cast<m3_bf16>(0);
#else
#if M3_CP_EARLY_LOADS
      if (early) {
#if M3_CP_ANGLE_QUADS
        const unsigned w = it < 2 ? early->angles4.x : early->angles4.y;
        raw[it] = static_cast<m3_bf16>((it & 1) ? w >> 16 : w & 0xffffu);
#else
        raw[it] = early->angles[it];
#endif
      } else
#endif
      {
        raw[it] = t < len ? p.angles[(static_cast<long long>(sh.start + a + t) * H + sh.h) * A + i]
                          : static_cast<m3_bf16>(0);
      }
#endif
    }
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
      const int e = angle_element(tid, it), t = e / A;
      const float th = t < len ? kM3Pi * m3_tanhf(bf2f(raw[it])) : 0.f;
      s.th[angle_index(e, t)] = th;
      s.phi[angle_index(e, t)] = th * s.vv(kVecDt)[t];
    }
  }
#else
  for (int e = tid; e < C * A; e += NT) {
    const int t = e / A, i = e % A;
    float th = 0.f;
    if (t < len) {
      const int tg = sh.start + a + t;
      th = kM3Pi * m3_tanhf(bf2f(p.angles[(static_cast<long long>(tg) * H + sh.h) * A + i]));
    }
    s.th[angle_index(e, t)] = th;
    s.phi[angle_index(e, t)] = th * s.vv(kVecDt)[t];
  }
#endif
  __syncthreads();
#if M3_CP_TRIMS
  {
    // A warp's A / NW angle indices scanned together.
    constexpr int K = A / NW;
    static_assert(K * NW == A, "angle indices must split evenly over the warps");
    float carry[K], x[K];
#pragma unroll
    for (int u = 0; u < K; ++u) carry[u] = s.phi_carry()[warp + u * NW];
#pragma unroll
    for (int base = 0; base < C; base += 32) {
      const int t = base + lane;
#pragma unroll
      for (int u = 0; u < K; ++u) x[u] = s.phi[t * LDA + warp + u * NW];
      warp_inclusive_scan_n<K>(x);
#pragma unroll
      for (int u = 0; u < K; ++u) {
        x[u] += carry[u];
        carry[u] = __shfl_sync(0xffffffffu, x[u], 31);
        s.phi[t * LDA + warp + u * NW] = (t < len) ? x[u] : 0.f;
      }
    }
  }
#else
  for (int i = warp; i < A; i += NW) {
    float carry = s.phi_carry()[i];
#pragma unroll
    for (int base = 0; base < C; base += 32) {
      const int t = base + lane;
      const float x = warp_inclusive_scan(s.phi[t * LDA + i]) + carry;
      carry = __shfl_sync(0xffffffffu, x, 31);
      s.phi[t * LDA + i] = (t < len) ? x : 0.f;
    }
  }
#endif
#else
  // Angle sums: one thread per angle index, sequential over the chunk's tokens, in fp32.
  if (tid >= 32 && tid < 32 + A) {
    const int i = tid - 32;
    float run = s.phi_carry()[i];
    for (int t = 0; t < C; ++t) {
      float th = 0.f;
      if (t < len) {
        const int tg = sh.start + a + t;
        th = kM3Pi * m3_tanhf(bf2f(p.angles[(static_cast<long long>(tg) * H + sh.h) * A + i]));
        run = fmaf(th, s.vv(kVecDt)[t], run);
      }
      s.th[t * LDA + i] = th;
      s.phi[t * LDA + i] = (t < len) ? run : 0.f;
    }
  }
#endif
  __syncthreads();
  if (tid < C) {
    const int t = tid;
    const float* cl = s.vv(kVecCl);
    s.vv(kVecE)[t] = m3_decay_expf(cl[t]);
    s.vv(kVecWb)[t] = (t < len) ? m3_decay_expf(cl[len - 1] - cl[t]) : 0.f;
  }
#if M3_VECTOR_IO
  // q/k rows: 16 lanes per token, 8 consecutive columns (4 rotary pairs) per lane.
  {
    constexpr int OCT = N / 8, ROWS = NT / OCT, PASSES = C / ROWS;
    static_assert(ROWS * PASSES == C && OCT == 16, "q/k staging expects 16 octets per row");
#if M3_CP_ROW_PAIRED_LANES
    int o, r0;
    row_paired_octet(tid, o, r0);
#else
    const int o = tid % OCT, r0 = tid / OCT;
#endif
    uint4 qv[PASSES], kv[PASSES];
#pragma unroll
    for (int ps = 0; ps < PASSES; ++ps) {
      const int t = ps * ROWS + r0;
      const long long tg = sh.start + a + t;
#if M3_CP_PREFETCH
      (void)tg;
      qv[ps] = t < len ? ldg16(s.raw + RawTiles::kQ + t * N + 8 * o) : make_uint4(0u, 0u, 0u, 0u);
      kv[ps] = t < len ? ldg16(s.raw + RawTiles::kK + t * N + 8 * o) : make_uint4(0u, 0u, 0u, 0u);
#else
#if M3_CP_EARLY_LOADS
      if (early) {
        qv[ps] = early->qv[ps];
        kv[ps] = early->kv[ps];
      } else
#endif
      {
        qv[ps] = t < len ? ldg16(p.q + tg * N + 8 * o) : make_uint4(0u, 0u, 0u, 0u);
        kv[ps] = t < len ? ldg16(p.k + tg * N + 8 * o) : make_uint4(0u, 0u, 0u, 0u);
      }
#endif
    }
    float qb[8], kb[8];
#if M3_CP_EARLY_LOADS
    if (early) {
#pragma unroll
      for (int j = 0; j < 8; ++j) qb[j] = early->qb[j], kb[j] = early->kb[j];
    } else
#endif
    {
      load_f32x8(p.q_bias + sh.h * N + 8 * o, qb);
      load_f32x8(p.k_bias + sh.h * N + 8 * o, kb);
    }
#if M3_CP_TRIMS
    float raws[PASSES];
#endif
#pragma unroll
    for (int ps = 0; ps < PASSES; ++ps) {
      const int t = ps * ROWS + r0;
      const bool live = t < len;
      float qh[8], kh[8];
      unpack_bf16x8(qv[ps], qh);
      unpack_bf16x8(kv[ps], kh);
      float raw = 0.f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        qh[j] = live ? qh[j] + qb[j] : 0.f;
        kh[j] = live ? kh[j] + kb[j] : 0.f;
        raw = fmaf(qh[j], kh[j], raw);
      }
#pragma unroll
      for (int jp = 0; jp < 4; ++jp) {
        const int pair = 4 * o + jp;
        if (live && pair < A) {
          float sn, cs;
          m3_sincos(s.phi[t * LDA + pair], &sn, &cs);
          const float q0 = qh[2 * jp], q1 = qh[2 * jp + 1], k0 = kh[2 * jp], k1 = kh[2 * jp + 1];
          qh[2 * jp] = q0 * cs - q1 * sn;
          qh[2 * jp + 1] = q0 * sn + q1 * cs;
          kh[2 * jp] = k0 * cs - k1 * sn;
          kh[2 * jp + 1] = k0 * sn + k1 * cs;
        }
      }
      // Not swizzled: under M3_CP_SWIZZLED_HALVES here the backward's spill stores grew from 72 to
      // 116 bytes (ptxas), against 68 with the staging stores and the epilogue loads alone.
      store_qk_octet(s.qr, t, o, qh);
      store_qk_octet(s.kr, t, o, kh);
#if M3_CP_TRIMS
      raws[ps] = raw;
    }
#if M3_CP_ROW_PAIRED_LANES
    // The octet bits 3, 2, 1, 0 are lane bits 4, 3, 1, 0: group_sum_n's order, so the same sums.
    lane_sum_n<PASSES>(raws, 16, 8, 2, 1);
#else
    group_sum_n<PASSES, OCT>(raws);
#endif
#pragma unroll
    for (int ps = 0; ps < PASSES; ++ps) {
      if (o == 0) s.vv(kVecQkRaw)[ps * ROWS + r0] = raws[ps];
    }
#else
#pragma unroll
      for (int off = OCT / 2; off > 0; off >>= 1) raw += __shfl_xor_sync(0xffffffffu, raw, off);
      if (o == 0) s.vv(kVecQkRaw)[t] = raw;
    }
#endif
  }
#if M3_CP_PREFETCH
  stage_bf16_rows<C, P>(s.raw + RawTiles::kV, nullptr, P, len, s.v, LDVY M3_SKEW_ARG(kVySkew), [](float x, float) { return x; });
#else
#if M3_CP_EARLY_LOADS >= 2
  if (early) {
    store_bf16_words(early->v, early->v, len, s.v, LDVY M3_SKEW_ARG(kVySkew), [](float x, float) { return x; });
  } else {
    stage_bf16_rows<C, P>(p.v + (static_cast<long long>(sh.start + a) * H + sh.h) * P, nullptr,
                          static_cast<long long>(H) * P, len, s.v, LDVY M3_SKEW_ARG(kVySkew), [](float x, float) { return x; });
  }
#else
  // (Spelled out apart from the branch above: inside a block of its own the walkers' SASS changed.)
  stage_bf16_rows<C, P>(p.v + (static_cast<long long>(sh.start + a) * H + sh.h) * P, nullptr,
                        static_cast<long long>(H) * P, len, s.v, LDVY M3_SKEW_ARG(kVySkew), [](float x, float) { return x; });
#endif
#endif
#else
  // q/k rows: a warp per token, a lane per rotary pair.
#if !M3_PARALLEL_SCALARS
  const int warp = tid >> 5, lane = tid & 31;
#endif
  for (int t = warp; t < C; t += NW) {
    float raw = 0.f;
    const int tg = sh.start + a + t;
#pragma unroll
    for (int m = 0; m < NPAIR / 32; ++m) {
      const int i2 = lane + 32 * m;
      const int n0 = 2 * i2, n1 = n0 + 1;
      float q0 = 0.f, q1 = 0.f, k0 = 0.f, k1 = 0.f;
      if (t < len) {
        q0 = bf2f(p.q[static_cast<long long>(tg) * N + n0]) + p.q_bias[sh.h * N + n0];
        q1 = bf2f(p.q[static_cast<long long>(tg) * N + n1]) + p.q_bias[sh.h * N + n1];
        k0 = bf2f(p.k[static_cast<long long>(tg) * N + n0]) + p.k_bias[sh.h * N + n0];
        k1 = bf2f(p.k[static_cast<long long>(tg) * N + n1]) + p.k_bias[sh.h * N + n1];
        raw = fmaf(q0, k0, fmaf(q1, k1, raw));
        if (i2 < A) {
          float sn, cs;
          m3_sincos(s.phi[t * LDA + i2], &sn, &cs);
          const float rq0 = q0 * cs - q1 * sn, rq1 = q0 * sn + q1 * cs;
          const float rk0 = k0 * cs - k1 * sn, rk1 = k0 * sn + k1 * cs;
          q0 = rq0; q1 = rq1; k0 = rk0; k1 = rk1;
        }
      }
      s.qr[M3_QK_AT(t, n0)] = q0;
      s.qr[M3_QK_AT(t, n1)] = q1;
      s.kr[M3_QK_AT(t, n0)] = k0;
      s.kr[M3_QK_AT(t, n1)] = k1;
    }
    raw = warp_sum(raw);
    if (lane == 0) s.vv(kVecQkRaw)[t] = raw;
  }
  for (int e = tid; e < C * P; e += NT) {
    const int t = e / P, pp = e % P;
    float val = 0.f;
    if (t < len) {
      const int tg = sh.start + a + t;
      val = bf2f(p.v[(static_cast<long long>(tg) * H + sh.h) * P + pp]);
    }
    s.v[M3_VY_ROW(t) + pp] = val;
  }
#endif
  __syncthreads();
}

// M[t][s] = exp(c[t] - c[s]) * (qr[t] . ks[s]) on s <= t < len, else 0.
// kByLdmatrix: its operands by ldmatrix (M3_LDMATRIX), the same bits.
template <bool kByLdmatrix>
M3_DEV void build_mixing(Smem& s, int len) {
  Tile<C, C, C / 16, C / 16> tile;
  if constexpr (kByLdmatrix) {
    tile.template mac<N>(SmemRowsA{s.qr, LDQK, kQkSkew, kQkFlip}, SmemRowsB{s.kr, LDQK, kQkSkew, kQkFlip});
  } else {
    tile.template mac<N>(M3_SCALAR_ROWS_AS(s.qr, LDQK, kQkSkew, kQkFlip), M3_SCALAR_ROWS_BS(s.kr, LDQK, kQkSkew, kQkFlip));
  }
  const float* cl = s.vv(kVecCl);
  const float* sc = s.vv(kVecSc);
  tile.for_each([&](int r, int c, float acc) {
    s.m[M3_MX_ROW(r) + c] = (c <= r && r < len) ? m3_decay_expf(cl[r] - cl[c]) * sc[c] * acc : 0.f;
  });
  __syncthreads();
}

#if M3_CP_STORED_MIXING
// The mixing matrix travels between the kernels packed, C x C (M3_CP_STORED_MIXING, v69): the
// forward builds it anyway, and rebuilding it (a C x C x N product, its exponentials and a
// barrier) was 4.6% of the backward's stall samples in run 50; the load costs 4 KB per chunk and
// head and goes out with the chunk's first loads.
M3_DEV void store_mixing(const Smem& s, float* out) {
  for (int w = M3_TID(); w < C * C / 4; w += NT) {
    const int r = w / (C / 4), c = 4 * (w % (C / 4));
    *reinterpret_cast<float4*>(out + r * C + c) = *reinterpret_cast<const float4*>(s.m + r * LDC + c);
  }
}
M3_DEV void request_mixing(Smem& s, const float* in) {
  for (int w = M3_TID(); w < C * C / 4; w += NT) {
    const int r = w / (C / 4), c = 4 * (w % (C / 4));
    cp_async16(s.m + r * LDC + c, in + r * C + c);
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
}
#endif

M3_DEV float wrap_angle(float x) { return x - kM3TwoPi * floorf(x / kM3TwoPi); }

// The P x N state tile type; its accumulators hold a chunk's contribution to a state.
using StateTile = Tile<P, N, 4, 8>;

// Everything of a forward chunk that the state does not enter: the chunk's inputs, decays,
// angles and rotations (load_chunk), the gate's inputs and the mixing matrix.
M3_DEV void forward_prepare(const M3Params& p, const SeqHead& sh, Smem& s, int a, int len) {
  const int H = p.H;
  (void)H;
#if M3_CP_EARLY_LOADS
  // Issued before load_chunk's first statement, the scalar phase's loads.
  EarlyLoads early;
  early.issue(p, sh, a, len);
  load_chunk(p, sh, s, a, len, &early);
#else
  load_chunk(p, sh, s, a, len);
#endif
#if M3_STAGE_ALL
  // The gate's inputs, staged while dy and t1 are idle in the forward walk (dout in rows of
  // P, so that a forward-only layout can give t1 just C x P); build_mixing's closing barrier
  // publishes them.
  {
#if M3_CP_PREFETCH
    stage_bf16_rows<C, P>(s.raw + RawTiles::kZ, nullptr, P, len, s.dy, LDVY M3_SKEW_ARG(kVySkew), [](float x, float) { return x; });
    if (p.dz) {
      stage_bf16_rows<C, P>(s.raw + RawTiles::kDout, nullptr, P, p.dout ? len : 0, s.t1, LDP M3_SKEW_ARG(0),
                            [](float x, float) { return x; });
    }
#elif M3_CP_EARLY_LOADS >= 2
    store_bf16_words(early.z, early.z, len, s.dy, LDVY M3_SKEW_ARG(kVySkew), [](float x, float) { return x; });
    if (p.dz) store_bf16_words(early.dout, early.dout, p.dout ? len : 0, s.t1, LDP M3_SKEW_ARG(0), [](float x, float) { return x; });
#else
    const long long row0 = (static_cast<long long>(sh.start + a) * H + sh.h) * P;
    stage_bf16_rows<C, P>(p.z + row0, nullptr, static_cast<long long>(H) * P, len, s.dy, LDVY M3_SKEW_ARG(kVySkew),
                          [](float x, float) { return x; });
    // A missing dout (nullptr) is zero; without dz (forward only) it is not needed at all.
    if (p.dz) {
      stage_bf16_rows<C, P>(p.dout ? p.dout + row0 : p.z + row0, nullptr, static_cast<long long>(H) * P,
                            p.dout ? len : 0, s.t1, LDP M3_SKEW_ARG(0), [](float x, float) { return x; });
    }
#endif
  }
#endif
  build_mixing<M3_LDMATRIX == 1>(s, len);
}

// y = intra-chunk part + e * (state entering the chunk: s.st, or s.gst under M3_CP_FWD_GLOBAL_STATE) qr
// + skip terms, then the gate:
// output and dz.
M3_DEV void forward_outputs(const M3Params& p, const SeqHead& sh, Smem& s, int a, int len) {
  const int H = p.H;
  const float dh = p.d[sh.h];
  const float* e = s.vv(kVecE);
  {
    Tile<C, P, C / 16, 4> intra, inter;
    intra.template mac<C>(M3_SHARED_ROWS_AS(s.m, LDMX, kMxSkew, 0),
                          [&](int k, int c) { return s.v[M3_VY_ROW(k) + c]; });
#if M3_CP_FWD_GLOBAL_STATE == 2
    inter.template mac_rows_contiguous_k<N>(s.qr, LDN, [&](int r, int pos) { return s.st4_published(r, pos); });
#elif M3_CP_FWD_GLOBAL_STATE
    inter.template mac_frag_rows<N>(M3_SHARED_ROWS_AS(s.qr, LDQK, kQkSkew, kQkFlip),
                                    [&](int r, int pos) { return s.st4_published(r, pos); });
#else
    inter.template mac<N>(M3_SHARED_ROWS_AS(s.qr, LDQK, kQkSkew, kQkFlip),
                          M3_SHARED_ROWS_B(s.st, LDN));
#endif
    const float* qkraw = s.vv(kVecQkRaw);
    const float* gam = s.vv(kVecGam);
#if M3_CP_PAIRED_STORES && M3_STAGE_ALL
    // The output and dz of two columns side by side, each as below, leave as bf16 pairs.
    const auto gated = [&](int r, int c, float acc_intra, float acc_inter) {
      const float y = acc_intra + e[r] * acc_inter + (dh - qkraw[r] * gam[r]) * s.v[M3_VY_ROW(r) + c];
      const float zz = s.dy[M3_VY_ROW(r) + c];
      const float dout = p.dz ? s.t1[r * LDP + c] : 0.f;
      const float sg = gate_sigmoidf(zz);
      return make_float2(y * zz * sg, dout * y * sg * (1.f + zz * (1.f - sg)));
    };
    zip_for_each_pair(intra, inter, [&](int r, int c, float i0, float i1, float x0, float x1) {
      if (r < len) {
        const long long idx = (static_cast<long long>(sh.start + a + r) * H + sh.h) * P + c;
        const float2 g0 = gated(r, c, i0, x0), g1 = gated(r, c + 1, i1, x1);
        *reinterpret_cast<unsigned*>(p.output + idx) = f2bf_pair(g0.x, g1.x);
        if (p.dz) *reinterpret_cast<unsigned*>(p.dz + idx) = f2bf_pair(g0.y, g1.y);
      }
    });
#else
    zip_for_each(intra, inter, [&](int r, int c, float acc_intra, float acc_inter) {
      if (r < len) {
        const float y = acc_intra + e[r] * acc_inter + (dh - qkraw[r] * gam[r]) * s.v[M3_VY_ROW(r) + c];
        const long long idx = (static_cast<long long>(sh.start + a + r) * H + sh.h) * P + c;
#if M3_STAGE_ALL
        const float zz = s.dy[M3_VY_ROW(r) + c];
        const float dout = p.dz ? s.t1[r * LDP + c] : 0.f;
#else
        const float zz = bf2f(p.z[idx]);
        const float dout = p.dout ? bf2f(p.dout[idx]) : 0.f;
#endif
        const float sg = gate_sigmoidf(zz);
        p.output[idx] = f2bf(y * zz * sg);
        if (p.dz) p.dz[idx] = f2bf(dout * y * sg * (1.f + zz * (1.f - sg)));
      }
    });
#endif
  }
  __syncthreads();
}

#if M3_CP_SPREAD_K && (M3_SPLIT_TF32 || !M3_USE_MMA)
#error "M3_CP_SPREAD_K reorders plain tf32 products only"
#endif
// Which products take mac_spread_k's order (M3_CP_SPREAD_K): the forward's chunk state at every
// level, the backward's dv and dks intra products at 1 and 2, its state-gradient product at 1.
// Macros, not constexpr variables: a namespace-scope constant moves the kernels' constant bank.
#define M3_SPREAD_BACKWARD_INTRA (M3_CP_SPREAD_K == 1 || M3_CP_SPREAD_K == 2)
// tile += A B for operands both read along k element by element: in mac_spread_k's k order when
// kSpread, else by mac_exact (kExact) or mac.
template <int K, bool kSpread, bool kExact, class TileT, class FA, class FB>
M3_DEV void mac_along_k(TileT& tile, FA fa, FB fb) {
  if constexpr (kSpread) {
    tile.template mac_spread_k<K>(fa, fb);
  } else if constexpr (kExact) {
    tile.template mac_exact<K>(fa, fb);
  } else {
    tile.template mac<K>(fa, fb);
  }
}

// The chunk's own contribution to the state leaving it: sum_s wb[s] v[s] ks[s]^T.
M3_DEV void chunk_state_contribution(Smem& s, StateTile& upd) {
  const float* wb = s.vv(kVecWb);
  const float* sc = s.vv(kVecSc);
  mac_along_k<C, M3_CP_SPREAD_K != 0, true>(upd, [&](int r, int k) { return s.v[M3_VY_ROW(k) + r]; },
                                 [&](int k, int c) { return wb[k] * sc[k] * s.kr[M3_QK_AT(k, c)]; });
}

M3_DEV void forward_chunk(const M3Params& p, const SeqHead& sh, Smem& s, int j, int a, int len) {
  const int H = p.H;
  const int chunk = sh.chunk_base + j;
  // The angle sum entering the chunk, for the backward walk.
  if (M3_TID() < A) {
    p.ws_phi[(static_cast<long long>(chunk) * H + sh.h) * A + M3_TID()] = s.phi_carry()[M3_TID()];
  }
  forward_prepare(p, sh, s, a, len);
  forward_outputs(p, sh, s, a, len);
  // Save the entering state, then S <- alpha S + sum_s wb[s] v[s] ks[s]^T.
  {
    const float alpha = s.vv(kVecE)[len - 1];
    StateTile upd;
    chunk_state_contribution(s, upd);
    float* saved = p.ws_states + (static_cast<long long>(chunk) * H + sh.h) * P * N;
    upd.for_each([&](int r, int c, float acc) {
      const float old = s.st[r * LDN + c];
      saved[r * N + c] = old;
      s.st[r * LDN + c] = alpha * old + acc;
    });
  }
  if (M3_TID() < A) {
    s.phi_carry()[M3_TID()] = wrap_angle(s.phi[(len - 1) * LDA + M3_TID()]);
  }
  __syncthreads();
}

// Carried between backward chunks by thread 0.
struct BackwardCarry {
  float dadt_run;     // sum of dc over the tokens after this chunk
  float dc_pending;   // dc of the previous chunk's last token, from this chunk's boundary terms
  float ddt_first;    // ddt of the first token of the chunk processed last, minus its shift term
  float dp_first;     // likewise for dp
  float dd_sum;       // sum of dy . v
};

#if M3_PARALLEL_SCALARS
// Suffix sum over the 32 lanes: lane l gets the sum of lanes l..31.
M3_DEV float warp_suffix_sum(float x) {
  const int lane = M3_TID() & 31;
  const float r = warp_inclusive_scan(__shfl_sync(0xffffffffu, x, 31 - lane));
  return __shfl_sync(0xffffffffu, r, 31 - lane);
}

// The per-token tail of a backward chunk, spread over lanes: Phi (the reverse angle cumsum) by one
// warp scan per angle index, dangles, then warp 0 with a lane per token for dadt's reverse cumsum
// and the one-token shift of the gamma terms onto dt and trap. `bc` is kept identical in all
// lanes of warp 0.
M3_DEV void backward_token_scalars_parallel(const M3Params& p, const SeqHead& sh, Smem& s, int a, int len,
                                            bool last_chunk, float da, float dc0, BackwardCarry& bc) {
  const int H = p.H;
  const int T = p.T;
  const int tid = M3_TID(), warp = tid >> 5, lane = tid & 31;
#if M3_CP_TRIMS
  {
    // A warp's A / NW angle indices, their suffix sums interleaved.
    constexpr int K = A / NW;
    static_assert(K * NW == A, "angle indices must split evenly over the warps");
    float carry[K], x[K];
#pragma unroll
    for (int u = 0; u < K; ++u) carry[u] = s.big_phi_carry()[warp + u * NW];
#pragma unroll
    for (int base = C - 32; base >= 0; base -= 32) {
      const int t = base + lane;
#pragma unroll
      for (int u = 0; u < K; ++u) {
        const int i = warp + u * NW;
        x[u] = 0.f;
        if (t < len) {
          x[u] = s.dphi[t * LDA + i];
          if (a + t == sh.len - 1 && p.dfinal_angle) x[u] += bf2f(p.dfinal_angle[(sh.seq * H + sh.h) * A + i]);
        }
        x[u] = __shfl_sync(0xffffffffu, x[u], 31 - lane);
      }
      warp_inclusive_scan_n<K>(x);
#pragma unroll
      for (int u = 0; u < K; ++u) {
        const float suffix = __shfl_sync(0xffffffffu, x[u], 31 - lane) + carry[u];
        carry[u] = __shfl_sync(0xffffffffu, suffix, 0);
        s.dphi[t * LDA + warp + u * NW] = suffix;
      }
    }
    if (lane == 0) {
#pragma unroll
      for (int u = 0; u < K; ++u) s.big_phi_carry()[warp + u * NW] = carry[u];
    }
  }
#else
  for (int i = warp; i < A; i += NW) {
    float carry = s.big_phi_carry()[i];
#pragma unroll
    for (int base = C - 32; base >= 0; base -= 32) {
      const int t = base + lane;
      float x = 0.f;
      if (t < len) {
        x = s.dphi[t * LDA + i];
        if (a + t == sh.len - 1 && p.dfinal_angle) x += bf2f(p.dfinal_angle[(sh.seq * H + sh.h) * A + i]);
      }
      const float suffix = warp_suffix_sum(x) + carry;
      carry = __shfl_sync(0xffffffffu, suffix, 0);
      s.dphi[t * LDA + i] = suffix;
    }
    if (lane == 0) s.big_phi_carry()[i] = carry;
  }
#endif
  __syncthreads();
  const float* dtv = s.vv(kVecDt);
#if M3_CP_PAIRED_STORES
  // Angle indices i and i + 1 of a token in one 4-byte store (A is even), each as below.
  static_assert(A % 2 == 0, "angle pairs");
  const auto dangle_at = [&](int e, int t) {
    const float tnh = s.th[angle_index(e, t)] / kM3Pi;
    return s.dphi[angle_index(e, t)] * dtv[t] * kM3Pi * (1.f - tnh * tnh);
  };
  for (int e = 2 * tid; e < len * A; e += 2 * NT) {
    const int t = e / A, i = e % A;
    const int tg = sh.start + a + t;
    *reinterpret_cast<unsigned*>(p.dangles + (static_cast<long long>(tg) * H + sh.h) * A + i) =
        f2bf_pair(dangle_at(e, t), dangle_at(e + 1, t));
  }
#else
  for (int e = tid; e < len * A; e += NT) {
    const int t = e / A, i = e % A;
    const int tg = sh.start + a + t;
    const float tnh = s.th[angle_index(e, t)] / kM3Pi;
    p.dangles[(static_cast<long long>(tg) * H + sh.h) * A + i] =
        f2bf(s.dphi[angle_index(e, t)] * dtv[t] * kM3Pi * (1.f - tnh * tnh));
  }
#endif
#if M3_CP_TRIMS
  {
    constexpr int K = C / NW;
    static_assert(K * NW == C && A <= 32, "a lane per angle index, tokens split evenly over the warps");
    float ang[K];
#pragma unroll
    for (int u = 0; u < K; ++u) {
      const int t = warp + u * NW;
      ang[u] = (t < len && lane < A) ? s.dphi[t * LDA + lane] * s.th[t * LDA + lane] : 0.f;
    }
    warp_sum_n<K>(ang);
#pragma unroll
    for (int u = 0; u < K; ++u) {
      const int t = warp + u * NW;
      if (lane == 0 && t < len) s.vv(kVecAng)[t] = ang[u];
    }
  }
#else
  for (int t = warp; t < len; t += NW) {
    float ang = 0.f;
    for (int i = lane; i < A; i += 32) ang = fmaf(s.dphi[t * LDA + i], s.th[t * LDA + i], ang);
    ang = warp_sum(ang);
    if (lane == 0) s.vv(kVecAng)[t] = ang;
  }
#endif
  if (tid < C) {
    const int t = tid;
    s.vv(kVecDgam)[t] = (t < len) ? -s.vv(kVecDyv)[t] * s.vv(kVecQkRaw)[t] + s.vv(kVecDsc)[t] : 0.f;
  }
  __syncthreads();
  if (warp == 0) {
    const float* xs = s.vv(kVecXs);
    const float* uu = s.vv(kVecU);
    const float* pv = s.vv(kVecP);
    const float* dgam = s.vv(kVecDgam);
    float sum_x = 0.f, sum_u = 0.f, sum_dyv = 0.f;
#pragma unroll
    for (int base = 0; base < C; base += 32) {
      const int t = base + lane;
      if (t < len) {
        sum_x += xs[t];
        sum_u += uu[t];
        sum_dyv += s.vv(kVecDyv)[t];
      }
    }
#if M3_CP_TRIMS
    {
      float sums[3] = {sum_x, sum_u, sum_dyv};
      warp_sum_n<3>(sums);
      sum_x = sums[0];
      sum_u = sums[1];
      bc.dd_sum += sums[2];
    }
#else
    sum_x = warp_sum(sum_x);
    sum_u = warp_sum(sum_u);
    bc.dd_sum += warp_sum(sum_dyv);
#endif
    // The first token of the chunk after this one still waits for dgam of our last token
    // (M3_CP_HANDOFF_CARRIES: the caller hands dgam on instead).
    if (!M3_CP_HANDOFF_CARRIES && !last_chunk && lane == 0) {
      const int tg = sh.start + a + len;
#if M3_CP_TRIMS
      const float pn = s.scalars()[kScalarPNext];
      const float dtn = s.scalars()[kScalarDtNext];
#else
      const float pn = sigmoidf(bf2f(p.trap[sh.h * T + tg]));
      const float dtn = p.dt[sh.h * T + tg];
#endif
      const float dgl = dgam[len - 1];
      p.ddt[sh.h * T + tg] = bc.ddt_first + dgl * (1.f - pn);
      p.dtrap[sh.h * T + tg] = f2bf((bc.dp_first - dgl * dtn) * pn * (1.f - pn));
    }
    float ddt_first = bc.ddt_first, dp_first = bc.dp_first;
#pragma unroll
    for (int base = C - 32; base >= 0; base -= 32) {
      const int t = base + lane;
      float dc = 0.f;
      if (t < len) {
        dc = s.vv(kVecRowG)[t] - s.vv(kVecColG)[t] + uu[t] - xs[t];
        if (t == len - 1) dc += sum_x + da + bc.dc_pending;
      }
      const float suffix = warp_suffix_sum(dc) + bc.dadt_run;
      bc.dadt_run = __shfl_sync(0xffffffffu, suffix, 0);
      if (t < len) {
        const int tg = sh.start + a + t;
        p.dadt[sh.h * T + tg] = suffix;
        const float dsc = s.vv(kVecDsc)[t];
        float ddt = dsc * pv[t] + s.vv(kVecAng)[t];
        float dp = dsc * dtv[t];
        if (t > 0) {
          ddt += dgam[t - 1] * (1.f - pv[t]);
          dp -= dgam[t - 1] * dtv[t];
        }
#if M3_INITIAL_STATES
        if (t == 0 && a == 0) {
          // c0 = (1 - p_0) dt_0 carries the initial states' b-term into the first token.
          ddt += dc0 * (1.f - pv[0]);
          dp -= dc0 * dtv[0];
        }
#endif
        if (t > 0 || a == 0) {
          p.ddt[sh.h * T + tg] = ddt;
          p.dtrap[sh.h * T + tg] = f2bf(dp * pv[t] * (1.f - pv[t]));
        } else {
          ddt_first = ddt;
          dp_first = dp;
        }
      }
    }
    bc.ddt_first = __shfl_sync(0xffffffffu, ddt_first, 0);
    bc.dp_first = __shfl_sync(0xffffffffu, dp_first, 0);
    bc.dc_pending = -da - sum_u;
  }
#if !M3_CP_TRIMS2
  // (Under M3_CP_TRIMS2 the caller's next barrier comes before anything overwrites what warp 0
  // still reads here.)
  __syncthreads();
#endif
}
#endif

#if M3_CP_HALF_STATES
// Where backward_prepare puts a thread's chunks of the half state: at its own columns c + 4 .. c + 7
// of the fp32 copy, or at c .. c + 3 for threads with bit 2 set, its scales at the other four.
// Eight consecutive threads' 16-byte slots then cover all 32 banks (with one choice for all, two
// threads met on each bank: twice the wavefronts).
M3_DEV int half_state_slot(int tid) { return 4 * (((tid >> 2) & 1) ^ 1); }

// A thread's share of the half state, the same for the copy and the widening: rows r0 + 16 q (q < 4),
// columns c .. c + 7, its halves at column c + hs of the fp32 copy and its scales at c + 4 - hs.
struct HalfStateShare {
  int r0, c, hs;
};
M3_DEV HalfStateShare half_state_share(int tid) {
  static_assert(NT % (N / 8) == 0 && NT / (N / 8) == 16 && P * N / 8 / NT == 4, "four 16-row blocks a thread");
  return HalfStateShare{tid / (N / 8), 8 * (tid % (N / 8)), half_state_slot(tid)};
}

// The thread's four chunks of the half state (and their blocks' inverse scales), as backward_prepare
// placed them, widened into the fp32 copy in place. Exact: a half times a power of two.
M3_DEV void widen_half_state(Smem& s) {
  const auto [r0, c, hs] = half_state_share(M3_TID());
  const float4 inv4 = *reinterpret_cast<const float4*>(s.t1 + M3_SS(r0, c + 4 - hs));
  const float inv[4] = {inv4.x, inv4.y, inv4.z, inv4.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int r = r0 + 16 * q;
    const uint4 h = *reinterpret_cast<const uint4*>(s.t1 + M3_SS(r, c + hs));
    const float f = inv[q];
    const float2 x0 = h2f_pair(h.x), x1 = h2f_pair(h.y), x2 = h2f_pair(h.z), x3 = h2f_pair(h.w);
    const float4 lo = make_float4(f * x0.x, f * x0.y, f * x1.x, f * x1.y);  // columns c .. c + 3
    const float4 hi = make_float4(f * x2.x, f * x2.y, f * x3.x, f * x3.y);
    // Each store, like each load, meets all 32 banks across eight threads.
    *reinterpret_cast<float4*>(s.t1 + M3_SS(r, c + hs)) = hs ? hi : lo;
    *reinterpret_cast<float4*>(s.t1 + M3_SS(r, c + 4 - hs)) = hs ? lo : hi;
  }
}
#endif

// Everything of a backward chunk that the state gradient does not enter: the chunk's inputs
// (load_chunk, with the angle sum entering it), the state entering it (`saved`; nullptr: zero),
// dy and the mixing matrix.
M3_DEV void backward_prepare(const M3Params& p, const SeqHead& sh, Smem& s, int chunk, int a, int len,
                             const float* saved) {
  const int H = p.H;
  const int tid = M3_TID();
#if M3_CP_SMEM_STATE
  static_assert(M3_CP_GLOBAL_STATES && !M3_FRAG_ST && M3_CP_FRAG_SUMS && M3_VECTOR_IO && !M3_CP_PREFETCH &&
                    !M3_CP_QUAD_COLUMNS && L.t2 == L.t1 + C * LDT && 2 * C * LDT >= P * N,
                "the state's copy goes over t1 and t2 in v135's backward");
  // Its chunks arrive while the chunk is staged; build_mixing's barrier below publishes them.
#if M3_CP_HALF_STATES
  // v252: the state in half. Each 16-byte chunk (eight columns) lands in the place of four of its
  // own columns in the fp32 copy, the thread's four blocks' inverse scales in the place of the other
  // four of its first chunk (half_state_slot): widen_half_state, after this thread's wait, reads
  // only the thread's own slots and fills them, so the copy needs no barrier of its own.
  {
    const auto [r0, c, hs] = half_state_share(tid);
    const unsigned short* halves = reinterpret_cast<const unsigned short*>(saved);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int r = r0 + 16 * q;
      if (saved) {
        cp_async16(s.t1 + M3_SS(r, c + hs), halves + r * N + c);
      } else {
        *reinterpret_cast<float4*>(s.t1 + M3_SS(r, c + hs)) = make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
    if (saved) {
      cp_async16(s.t1 + M3_SS(r0, c + 4 - hs), saved + P * N / 2 + 4 * (c / 64));
    } else {
      *reinterpret_cast<float4*>(s.t1 + M3_SS(r0, c + 4 - hs)) = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
#else
#pragma unroll
  for (int q = 0; q < P * N / 4 / NT; ++q) {
    // M3_CP_SMEM_STATE=2 (v150): each quarter-warp's eight chunks land in eight consecutive shared
    // slots and come from the permuted global chunks (the same 128 bytes), where level 1 permutes
    // the shared side (run 102: 2.3 M excess wavefronts on the copy, 490 a job, for 256 ideal).
#if M3_CP_SWIZZLE_FOLD
    // Chunk e = tid + q NT is row tid / (N / 4) + q NT / (N / 4), with the same (r & 3) and column
    // for every q: one global and one shared offset a thread, q an immediate (the signed division
    // and remainder of e were rebuilt for each q).
    static_assert(NT % (4 * (N / 4)) == 0, "q moves the row by a multiple of four");
    const int r0 = tid / (N / 4), r = r0 + q * (NT / (N / 4));
    const int c = M3_CP_SMEM_STATE >= 2 ? 4 * ((tid % (N / 4)) ^ ((r0 & 3) << 1)) : 4 * (tid % (N / 4));
    float* dst = s.t1 + r * N + ((((c >> 2) ^ ((r0 & 3) << 1)) << 2));
    if (saved) {
      cp_async16(dst, saved + r * N + c);
    } else {
      *reinterpret_cast<float4*>(dst) = make_float4(0.f, 0.f, 0.f, 0.f);
    }
#else
    const int e = tid + q * NT, r = e / (N / 4);
    const int c = M3_CP_SMEM_STATE >= 2 ? 4 * ((e % (N / 4)) ^ ((r & 3) << 1)) : 4 * (e % (N / 4));
    if (saved) {
      cp_async16(s.t1 + M3_SS(r, c), saved + r * N + c);
    } else {
      *reinterpret_cast<float4*>(s.t1 + M3_SS(r, c)) = make_float4(0.f, 0.f, 0.f, 0.f);
    }
#endif
  }
#endif  // M3_CP_HALF_STATES
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
#if M3_CP_TRIMS
  // By the last A threads, with no barrier of its own: load_chunk's first barrier precedes the
  // first use, and the load travels with load_chunk's first loads.
  if (tid >= NT - A) {
    s.phi_carry()[tid - (NT - A)] = p.ws_phi[(static_cast<long long>(chunk) * H + sh.h) * A + tid - (NT - A)];
  }
#else
  if (tid < A) {
    s.phi_carry()[tid] = p.ws_phi[(static_cast<long long>(chunk) * H + sh.h) * A + tid];
  }
  __syncthreads();
#endif
#if M3_CP_STORED_MIXING
  request_mixing(s, p.ws_mixing + (static_cast<long long>(chunk) * H + sh.h) * C * C);
#endif
#if M3_CP_EARLY_LOADS >= 3
  EarlyLoads early;
  early.issue(p, sh, a, len);
  load_chunk(p, sh, s, a, len, &early);
#else
  load_chunk(p, sh, s, a, len);
#endif
  {
#if M3_CP_PREFETCH
    // The state (when there is one) came with the prefetch.
    if (!saved) {
      for (int e = tid; e < P * N; e += NT) s.st[(e / N) * LDN + (e % N)] = 0.f;
    }
    stage_bf16_rows<C, P>(s.raw + RawTiles::kDout, s.raw + RawTiles::kZ, P, p.dout ? len : 0, s.dy, LDVY M3_SKEW_ARG(kVySkew),
                          [](float dout, float zz) { return dout * zz * m3_dy_sigmoidf(zz); });
  }
#elif M3_VECTOR_IO
#if M3_CP_GLOBAL_STATES
    (void)saved;  // read from global memory where it is used
#else
    if (saved) {
      stage_state(saved, s.st);
    } else {
      for (int e = tid; e < P * N; e += NT) s.st[(e / N) * LDN + (e % N)] = 0.f;
    }
#endif
#if M3_CP_EARLY_LOADS >= 3
    store_bf16_words(early.dout, early.z, p.dout ? len : 0, s.dy, LDVY M3_SKEW_ARG(kVySkew),
                     [](float dout, float zz) { return dout * zz * m3_dy_sigmoidf(zz); });
#else
    const long long row0 = (static_cast<long long>(sh.start + a) * H + sh.h) * P;
    stage_bf16_rows<C, P>(p.dout ? p.dout + row0 : p.z + row0, p.z + row0, static_cast<long long>(H) * P,
                          p.dout ? len : 0, s.dy, LDVY M3_SKEW_ARG(kVySkew),
                          [](float dout, float zz) { return dout * zz * m3_dy_sigmoidf(zz); });
#endif
  }
#else
    for (int e = tid; e < P * N; e += NT) s.st[(e / N) * LDN + (e % N)] = saved ? saved[e] : 0.f;
    for (int e = tid; e < C * P; e += NT) {
      const int t = e / P, c = e % P;
      float val = 0.f;
      if (t < len) {
        const long long idx = (static_cast<long long>(sh.start + a + t) * H + sh.h) * P + c;
        const float zz = bf2f(p.z[idx]);
        val = p.dout ? bf2f(p.dout[idx]) * zz * m3_dy_sigmoidf(zz) : 0.f;
      }
      s.dy[M3_VY_ROW(t) + c] = val;
    }
  }
#endif
#if M3_CP_STORED_MIXING
  asm volatile("cp.async.wait_all;" ::: "memory");
  __syncthreads();  // covers st and dy too, as build_mixing's barrier does
#else
#if M3_CP_SMEM_STATE
  asm volatile("cp.async.wait_all;" ::: "memory");
#endif
#if M3_CP_HALF_STATES
  widen_half_state(s);
#endif
  build_mixing<M3_LDMATRIX != 0>(s, len);  // ends with a barrier, which also covers st and dy
#endif
}

// dM through dks (into t2): the part of a backward chunk before the state-gradient update. Reads
// the gradient of the state leaving the chunk in s.ds.
M3_DEV void backward_intra(const M3Params& p, const SeqHead& sh, Smem& s, int a, int len) {
  const int H = p.H;
  const int T = p.T;
  const int tid = M3_TID();
  const int warp = tid >> 5, lane = tid & 31;
  (void)T;
  (void)warp;
  (void)lane;

  const float* cl = s.vv(kVecCl);
  const float* e = s.vv(kVecE);
  const float* wb = s.vv(kVecWb);
  const float* sc = s.vv(kVecSc);
  const float* gam = s.vv(kVecGam);
  const float* qkraw = s.vv(kVecQkRaw);
  const float dh = p.d[sh.h];

#if M3_CP_FRAG_SUMS
  // Per-warp partial sums, in the dphi tile (idle until the epilogue): four per token for the row
  // sums (one per warp column), two for the column sums (one per warp row).
  constexpr int kPartRowG = 0, kPartColG = 4 * C, kPartXs = 6 * C, kPartDyv = 10 * C, kPartU = 14 * C;
  static_assert(kPartU + 4 * C <= C * A, "the partial sums must fit in the dphi tile");
  float* part = s.dphi;
  const auto sum4 = [&](int at, int t) {
    return ((part[at + t] + part[at + C + t]) + part[at + 2 * C + t]) + part[at + 3 * C + t];
  };
#endif
  // dM[t][s] = dy[t] . v[s] on the causal part.
  {
    Tile<C, C, C / 16, C / 16> dm;
    dm.template mac<P>(M3_ROWS_AS(s.dy, LDVY, kVySkew, 0),
                       M3_ROWS_BS(s.v, LDVY, kVySkew, 0));
#if M3_CP_FRAG_SUMS
    // dc from the intra-chunk decays: row sums minus column sums of G = dM * M; then dM is
    // stored with its decay factor applied.
    const auto g_of = [&](int r, int c, float acc) { return (c <= r && r < len) ? acc * s.m[M3_MX_ROW(r) + c] : 0.f; };
    dm.row_sums(part + kPartRowG, g_of);
    dm.col_sums(part + kPartColG, g_of);
    dm.for_each([&](int r, int c, float acc) {
      s.x[M3_MX_ROW(r) + c] = (c <= r && r < len) ? acc * m3_decay_expf(cl[r] - cl[c]) : 0.f;
    });
#else
    dm.for_each([&](int r, int c, float acc) {
      s.x[M3_MX_ROW(r) + c] = (c <= r && r < len) ? acc : 0.f;
    });
#endif
  }
  __syncthreads();
  // dc from the intra-chunk decays: row sums minus column sums of G = dM * M.
#if M3_CP_FRAG_SUMS
  if (tid < C) {
    s.vv(kVecRowG)[tid] = sum4(kPartRowG, tid);
    s.vv(kVecColG)[tid] = part[kPartColG + tid] + part[kPartColG + C + tid];
  }
#elif M3_CP_TRIMS
  {
    // G = NT / C threads per token, each over every G-th term, then a butterfly over the G lanes.
    constexpr int G = NT / C;
    static_assert(G * C == NT && (G & (G - 1)) == 0 && G <= 32, "threads per token must be a power of two");
    const int t = tid / G, part = tid % G;
    float rg = 0.f, cg = 0.f;
#pragma unroll
    for (int u = part; u < C; u += G) {
      rg = fmaf(s.x[M3_MX_ROW(t) + u], s.m[M3_MX_ROW(t) + u], rg);
      cg = fmaf(s.x[M3_MX_ROW(u) + t], s.m[M3_MX_ROW(u) + t], cg);
    }
#pragma unroll
    for (int o = G / 2; o > 0; o >>= 1) {
      rg += __shfl_xor_sync(0xffffffffu, rg, o);
      cg += __shfl_xor_sync(0xffffffffu, cg, o);
    }
    if (part == 0) {
      s.vv(kVecRowG)[t] = rg;
      s.vv(kVecColG)[t] = cg;
    }
  }
#else
  if (tid < C) {
    float rg = 0.f, cg = 0.f;
    for (int u = 0; u < C; ++u) {
      rg = fmaf(s.x[M3_MX_ROW(tid) + u], s.m[M3_MX_ROW(tid) + u], rg);
      cg = fmaf(s.x[M3_MX_ROW(u) + tid], s.m[M3_MX_ROW(u) + tid], cg);
    }
    s.vv(kVecRowG)[tid] = rg;
    s.vv(kVecColG)[tid] = cg;
  }
#endif
#if !M3_CP_FRAG_SUMS
  __syncthreads();
  for (int el = tid; el < C * C; el += NT) {
    const int r = el / C, c = el % C;
    if (c <= r && r < len) s.x[M3_MX_ROW(r) + c] *= m3_decay_expf(cl[r] - cl[c]);
  }
#endif
  // dv: the state part first, kept in t1 for x[s] = v[s] . (state part).
  {
    Tile<C, P, C / 16, 4> stp, intra;
#if M3_FRAG_DS
    stp.template mac_frag_rows<N>(M3_ROWS_AS(s.kr, LDQK, kQkSkew, kQkFlip),
                                  [&](int r, int pos) { return s.ds4(r, pos); });
#elif M3_CP_GLOBAL_STATES
    stp.template mac<N>(M3_ROWS_AS(s.kr, LDQK, kQkSkew, kQkFlip), [&](int k, int c) { return s.ds_at(c, k); });
#else
    stp.template mac<N>(M3_ROWS_AS(s.kr, LDQK, kQkSkew, kQkFlip),
                        M3_ROWS_B(s.ds, LDN));
#endif
    mac_along_k<C, M3_SPREAD_BACKWARD_INTRA, false>(intra, [&](int r, int k) { return s.m[M3_MX_ROW(k) + r]; },
                                    [&](int k, int c) { return s.dy[M3_VY_ROW(k) + c]; });
#if M3_CP_PAIRED_STORES
    // Two columns a thread holds side by side: one 4-byte store of the pair, one address, one
    // test for the sequence's last token, the same arithmetic per element as below. There the
    // state part is rounded on its own and then added (FMUL, FADD in the SASS: the row sums after
    // share the product); written alike, this lambda's was fused into an FFMA, so the roundings
    // are spelled out.
    const auto dv_at = [&](int r, int c, float acc_state, float acc_intra) {
      const float sp = __fmul_rn(wb[r] * sc[r], acc_state);
      return fmaf(dh - qkraw[r] * gam[r], s.dy[M3_VY_ROW(r) + c], __fadd_rn(acc_intra, sp));
    };
    zip_for_each_pair(stp, intra, [&](int r, int c, float s0, float s1, float i0, float i1) {
      if (r < len) {
        const int tg = sh.start + a + r;
        float dv0 = dv_at(r, c, s0, i0), dv1 = dv_at(r, c + 1, s1, i1);
        if (a + r == sh.len - 1 && p.dfinal_v) {
          const m3_bf16* fv = p.dfinal_v + (sh.seq * H + sh.h) * P + c;
          dv0 += bf2f(fv[0]);
          dv1 += bf2f(fv[1]);
        }
        *reinterpret_cast<unsigned*>(p.dv + (static_cast<long long>(tg) * H + sh.h) * P + c) = f2bf_pair(dv0, dv1);
      }
    });
#else
    zip_for_each(stp, intra, [&](int r, int c, float acc_state, float acc_intra) {
      const float sp = wb[r] * sc[r] * acc_state;
#if !M3_CP_FRAG_SUMS
      s.t1[M3_T_ROW(r) + c] = sp;
#endif
      if (r < len) {
        const int tg = sh.start + a + r;
        float dv = acc_intra + sp + (dh - qkraw[r] * gam[r]) * s.dy[M3_VY_ROW(r) + c];
        if (a + r == sh.len - 1 && p.dfinal_v) dv += bf2f(p.dfinal_v[(sh.seq * H + sh.h) * P + c]);
#if !M3_CP_BACKWARD64KV
        p.dv[(static_cast<long long>(tg) * H + sh.h) * P + c] = f2bf(dv);
#else
        (void)tg, (void)dv;
#endif
      }
    });
#endif
#if M3_CP_FRAG_SUMS
    stp.row_sums(part + kPartXs, [&](int r, int c, float acc) { return s.v[M3_VY_ROW(r) + c] * (wb[r] * sc[r] * acc); });
    stp.row_sums(part + kPartDyv, [&](int r, int c, float) { return s.dy[M3_VY_ROW(r) + c] * s.v[M3_VY_ROW(r) + c]; });
#endif
  }
  __syncthreads();
#if M3_CP_FRAG_SUMS
  if (tid < C) {
    s.vv(kVecXs)[tid] = sum4(kPartXs, tid);
    s.vv(kVecDyv)[tid] = sum4(kPartDyv, tid);
  }
#elif M3_CP_TRIMS
  {
    // A warp's C / NW tokens, both sums of each, reduced together.
    constexpr int K = C / NW;
    static_assert(K * NW == C, "tokens must split evenly over the warps");
    float sums[2 * K];
#pragma unroll
    for (int u = 0; u < K; ++u) {
      const int t = warp + u * NW;
      float xs = 0.f, dyv = 0.f;
#pragma unroll
      for (int c = lane; c < P; c += 32) {
        xs = fmaf(s.v[M3_VY_ROW(t) + c], s.t1[M3_T_ROW(t) + c], xs);
        dyv = fmaf(s.dy[M3_VY_ROW(t) + c], s.v[M3_VY_ROW(t) + c], dyv);
      }
      sums[2 * u] = xs;
      sums[2 * u + 1] = dyv;
    }
    warp_sum_n<2 * K>(sums);
    if (lane == 0) {
#pragma unroll
      for (int u = 0; u < K; ++u) {
        s.vv(kVecXs)[warp + u * NW] = sums[2 * u];
        s.vv(kVecDyv)[warp + u * NW] = sums[2 * u + 1];
      }
    }
  }
#else
  for (int t = warp; t < C; t += NW) {
    float xs = 0.f, dyv = 0.f;
    for (int c = lane; c < P; c += 32) {
      xs = fmaf(s.v[M3_VY_ROW(t) + c], s.t1[M3_T_ROW(t) + c], xs);
      dyv = fmaf(s.dy[M3_VY_ROW(t) + c], s.v[M3_VY_ROW(t) + c], dyv);
    }
    xs = warp_sum(xs);
    dyv = warp_sum(dyv);
    if (lane == 0) {
      s.vv(kVecXs)[t] = xs;
      s.vv(kVecDyv)[t] = dyv;
    }
  }
#endif
#if !M3_CP_FRAG_SUMS
  __syncthreads();
#endif
  // dqr = (inter-chunk part, kept in t2 for u) + intra part, into t1.
#if M3_CP_QUAD_COLUMNS
  {
    static_assert(M3_CP_FRAG_SUMS && M3_CP_GLOBAL_STATES && !M3_FRAG_ST && M3_LDMATRIX,
                  "the quad-column dqr builds on v59's backward");
    MmaQuadTile<C, N, NT> inter, intra;
    inter.template mac4<P>(M3_ROWS_AS(s.dy, LDVY, kVySkew, 0), [&](int k, int c) {
      return s.gst ? M3_STATE_LOAD(reinterpret_cast<const float4*>(s.gst + k * N + c)) : make_float4(0.f, 0.f, 0.f, 0.f);
    });
    intra.template mac4<C>(M3_ROWS_AS(s.x, LDMX, kMxSkew, 0), [&](int k, int c) {
      const float4 kr = *reinterpret_cast<const float4*>(s.kr + M3_QK_ROW(k) + c);
      return make_float4(sc[k] * kr.x, sc[k] * kr.y, sc[k] * kr.z, sc[k] * kr.w);
    });
    float4 in[2 * 2 * inter.MT];
    int idx = 0;
    inter.for_each_quad([&](int, int, float4 q) { in[idx++] = q; });
    idx = 0;
    intra.for_each_quad([&](int r, int c, float4 q) {
      const float4 ip = in[idx++];
      *reinterpret_cast<float4*>(s.t1 + M3_T_ROW(r) + c) =
          make_float4(e[r] * ip.x + q.x, e[r] * ip.y + q.y, e[r] * ip.z + q.z, e[r] * ip.w + q.w);
    });
    inter.row_sums(part + kPartU, [&](int r, int c, float acc) { return s.qr[M3_QK_AT(r, c)] * (e[r] * acc); });
  }
#else
  {
    Tile<C, N, C / 16, 8> inter, intra;
#if M3_FRAG_ST
    inter.template mac_frag_cols<P>(M3_ROWS_AS(s.dy, LDVY, kVySkew, 0),
                                    [&](int r, int pos) { return s.st4(r, pos); });
#elif M3_CP_SMEM_STATE && M3_CP_SWIZZLE_FOLD
    static_assert(decltype(inter)::NTL == 4 && decltype(inter)::WN == 32, "n-tiles j < 4 of a 32-column warp tile");
    // mac_exact asks for k = k0 + t or k0 + t + 4 and c = n0 + 8 j + g (j: bits 3 and 4 of c): one
    // base per n-tile, the rows immediate offsets from it.
    const float* cols[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) cols[j] = s.t1 + inter.t * N + ss_tile_col(inter.n0, j, inter.g, inter.t);
    inter.template mac_exact<P>(M3_ROWS_AS(s.dy, LDVY, kVySkew, 0),
                                [&](int k, int c) { return cols[(c >> 3) & 3][(k - inter.t) * N]; });
#elif M3_CP_SMEM_STATE
    inter.template mac_exact<P>(M3_ROWS_AS(s.dy, LDVY, kVySkew, 0),
                                [&](int k, int c) { return s.t1[M3_SS(k, c)]; });
#elif M3_CP_GLOBAL_STATES
    inter.template mac_exact<P>(M3_ROWS_AS(s.dy, LDVY, kVySkew, 0),
                                [&](int k, int c) { return s.st_at(k, c); });
#else
    inter.template mac_exact<P>(M3_ROWS_AS(s.dy, LDVY, kVySkew, 0),
                          [&](int k, int c) { return s.st[k * LDN + c]; });
#endif
#if M3_CP_INTER_PARKED
    static_assert(M3_CP_SMEM_STATE && M3_CP_ROWS8_MXT && M3_CP_FRAG_SUMS, "parks v148's inter product in t1");
    __syncthreads();  // every warp's last read of the state's copy, which t1 overwrites
    inter.row_sums(part + kPartU, [&](int r, int c, float acc) { return s.qr[M3_QK_AT(r, c)] * (e[r] * acc); });
    inter.for_each_pair([&](int r, int c, float i0, float i1) {
      *reinterpret_cast<float2*>(s.t1 + M3_T_ROW(r) + c) = make_float2(i0, i1);
    });
    intra.template mac_exact<C>(M3_ROWS_AS(s.x, LDMX, kMxSkew, 0),
                                [&](int k, int c) { return sc[k] * s.kr[M3_QK_AT(k, c)]; });
    // The thread's own slots: fmaf as ptxas contracted e[r] * i + a in the zip below.
    intra.for_each_pair([&](int r, int c, float a0, float a1) {
      float2* slot = reinterpret_cast<float2*>(s.t1 + M3_T_ROW(r) + c);
      const float2 i = *slot;
      *slot = make_float2(fmaf(e[r], i.x, a0), fmaf(e[r], i.y, a1));
    });
#else
    intra.template mac_exact<C>(M3_ROWS_AS(s.x, LDMX, kMxSkew, 0),
                          [&](int k, int c) { return sc[k] * s.kr[M3_QK_AT(k, c)]; });
#if M3_CP_SMEM_STATE
    __syncthreads();  // every warp's last read of the state's copy, which t1 overwrites
#endif
#if M3_CP_ROWS8_MXT
    zip_for_each_pair(inter, intra, [&](int r, int c, float i0, float i1, float a0, float a1) {
      const float ip0 = e[r] * i0, ip1 = e[r] * i1;
      *reinterpret_cast<float2*>(s.t1 + M3_T_ROW(r) + c) = make_float2(ip0 + a0, ip1 + a1);
    });
#else
    zip_for_each(inter, intra, [&](int r, int c, float acc_inter, float acc_intra) {
      const float ip = e[r] * acc_inter;
#if !M3_CP_FRAG_SUMS
      s.t2[M3_T_ROW(r) + c] = ip;
#endif
      s.t1[M3_T_ROW(r) + c] = ip + acc_intra;
    });
#endif
#if M3_CP_FRAG_SUMS
    inter.row_sums(part + kPartU, [&](int r, int c, float acc) { return s.qr[M3_QK_AT(r, c)] * (e[r] * acc); });
#endif
#endif  // M3_CP_INTER_PARKED
  }
#endif
  __syncthreads();
#if M3_CP_FRAG_SUMS
  if (tid < C) s.vv(kVecU)[tid] = sum4(kPartU, tid);
#elif M3_CP_TRIMS
  {
    constexpr int K = C / NW;
    float us[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int t = warp + k * NW;
      float u = 0.f;
#pragma unroll
      for (int c = lane; c < N; c += 32) u = fmaf(s.qr[M3_QK_AT(t, c)], s.t2[M3_T_ROW(t) + c], u);
      us[k] = u;
    }
    warp_sum_n<K>(us);
    if (lane == 0) {
#pragma unroll
      for (int k = 0; k < K; ++k) s.vv(kVecU)[warp + k * NW] = us[k];
    }
  }
#else
  for (int t = warp; t < C; t += NW) {
    float u = 0.f;
    for (int c = lane; c < N; c += 32) u = fmaf(s.qr[M3_QK_AT(t, c)], s.t2[M3_T_ROW(t) + c], u);
    u = warp_sum(u);
    if (lane == 0) s.vv(kVecU)[t] = u;
  }
#endif
#if !M3_CP_FRAG_SUMS
  __syncthreads();
#endif
  // dks into t2.
  {
    Tile<C, N, C / 16, 8> intra, stp;
    mac_along_k<C, M3_SPREAD_BACKWARD_INTRA, true>(intra, [&](int r, int k) { return s.x[M3_MX_ROW(k) + r]; },
                                   [&](int k, int c) { return s.qr[M3_QK_AT(k, c)]; });
#if M3_FRAG_DS
    stp.template mac_frag_cols<P>(M3_ROWS_AS(s.v, LDVY, kVySkew, 0),
                                  [&](int r, int pos) { return s.ds4(r, pos); });
#elif M3_CP_GLOBAL_STATES
    stp.template mac_exact<P>(M3_ROWS_AS(s.v, LDVY, kVySkew, 0),
                              [&](int k, int c) { return s.ds_at(k, c); });
#else
    stp.template mac_exact<P>(M3_ROWS_AS(s.v, LDVY, kVySkew, 0),
                        [&](int k, int c) { return s.ds[k * LDN + c]; });
#endif
#if M3_CP_ROWS8_MXT
    zip_for_each_pair(intra, stp, [&](int r, int c, float a0, float a1, float s0, float s1) {
      *reinterpret_cast<float2*>(s.t2 + M3_T_ROW(r) + c) = make_float2(a0 + wb[r] * s0, a1 + wb[r] * s1);
    });
#else
    zip_for_each(intra, stp, [&](int r, int c, float acc_intra, float acc_state) {
      s.t2[M3_T_ROW(r) + c] = acc_intra + wb[r] * acc_state;
    });
#endif
  }
  __syncthreads();
}

// The chunk's own contribution to the gradient of the state entering it: sum_t e[t] dy[t] qr[t]^T.
M3_DEV void state_grad_contribution(Smem& s, StateTile& upd) {
  const float* e = s.vv(kVecE);
  mac_along_k<C, M3_CP_SPREAD_K == 1, true>(upd, [&](int r, int k) { return e[k] * s.dy[M3_VY_ROW(k) + r]; },
                                            [&](int k, int c) { return s.qr[M3_QK_AT(k, c)]; });
}

// Per-token gradients of q and k (per head, into the workspace), dphi and dscale; adds the
// chunk's bias-gradient terms to qb and kb.
M3_DEV void backward_token_epilogue(const M3Params& p, const SeqHead& sh, Smem& s, int a, int len,
                                    float (&qb)[kBiasRegs], float (&kb)[kBiasRegs]) {
  const int H = p.H;
  const int tid = M3_TID();
  const int warp = tid >> 5, lane = tid & 31;
  const float* sc = s.vv(kVecSc);
  const float* gam = s.vv(kVecGam);
  (void)warp;
  (void)lane;
#if M3_VECTOR_IO
  // Per-token epilogue: 16 lanes per token, 8 consecutive columns (4 rotary pairs) per lane.
  {
    constexpr int OCT = N / 8, ROWS = NT / OCT, PASSES = C / ROWS;
    const int o = tid % OCT, r0 = tid / OCT;
#if M3_CP_TRIMS
    // q + bias and k + bias are the rotated rows turned back (below): no second load of q and k.
    float dscs[PASSES];
#else
    uint4 qv[PASSES], kv[PASSES];
#pragma unroll
    for (int ps = 0; ps < PASSES; ++ps) {
      const int t = ps * ROWS + r0;
      const long long tg = sh.start + a + t;
      qv[ps] = t < len ? ldg16(p.q + tg * N + 8 * o) : make_uint4(0u, 0u, 0u, 0u);
      kv[ps] = t < len ? ldg16(p.k + tg * N + 8 * o) : make_uint4(0u, 0u, 0u, 0u);
    }
    float qbias[8], kbias[8];
    load_f32x8(p.q_bias + sh.h * N + 8 * o, qbias);
    load_f32x8(p.k_bias + sh.h * N + 8 * o, kbias);
#endif
#pragma unroll
    for (int ps = 0; ps < PASSES; ++ps) {
      const int t = ps * ROWS + r0;
      const bool live = t < len;
      float dsc = 0.f;
      if (live) {
        const int tg = sh.start + a + t;
        const float dqk = -s.vv(kVecDyv)[t];
        const float g = dqk * gam[t];
        float dqr[8], dks[8], kr[8], qr[8], qh[8], kh[8], dkr[8];
        M3_LOAD_F32X8_SHARED(s.t1 + M3_T_ROW(t) + 8 * o, dqr, o);
        M3_LOAD_F32X8_SHARED(s.t2 + M3_T_ROW(t) + 8 * o, dks, o);
        load_qk_octet(s.kr, t, o, kr);
        load_qk_octet(s.qr, t, o, qr);
#if M3_CP_TRIMS
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          qh[j] = qr[j];
          kh[j] = kr[j];
        }
#else
        unpack_bf16x8(qv[ps], qh);
        unpack_bf16x8(kv[ps], kh);
#endif
        float dfk[8];
        {
          const bool last_token = a + t == sh.len - 1 && p.dfinal_k;
          const float4* src = reinterpret_cast<const float4*>(p.dfinal_k + (sh.seq * H + sh.h) * N + 8 * o);
          const float4 zero4 = make_float4(0.f, 0.f, 0.f, 0.f);
          const float4 lo = last_token ? src[0] : zero4, hi = last_token ? src[1] : zero4;
          dfk[0] = lo.x; dfk[1] = lo.y; dfk[2] = lo.z; dfk[3] = lo.w;
          dfk[4] = hi.x; dfk[5] = hi.y; dfk[6] = hi.z; dfk[7] = hi.w;
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          dsc = fmaf(dks[j], kr[j], dsc);
          dkr[j] = sc[t] * dks[j] + dfk[j];
#if !M3_CP_TRIMS
          qh[j] += qbias[j];
          kh[j] += kbias[j];
#endif
        }
        float uq[8], uk[8];
#pragma unroll
        for (int jp = 0; jp < 4; ++jp) {
          const int pair = 4 * o + jp, n0 = 2 * jp, n1 = n0 + 1;
          uq[n0] = dqr[n0]; uq[n1] = dqr[n1]; uk[n0] = dkr[n0]; uk[n1] = dkr[n1];
          if (pair < A) {
            s.dphi[t * LDA + pair] = qr[n0] * dqr[n1] - qr[n1] * dqr[n0] + kr[n0] * dkr[n1] - kr[n1] * dkr[n0];
            float sn, cs;
            m3_sincos(s.phi[t * LDA + pair], &sn, &cs);
            uq[n0] = dqr[n0] * cs + dqr[n1] * sn;
            uq[n1] = -dqr[n0] * sn + dqr[n1] * cs;
            uk[n0] = dkr[n0] * cs + dkr[n1] * sn;
            uk[n1] = -dkr[n0] * sn + dkr[n1] * cs;
#if M3_CP_TRIMS
            qh[n0] = qr[n0] * cs + qr[n1] * sn;
            qh[n1] = -qr[n0] * sn + qr[n1] * cs;
            kh[n0] = kr[n0] * cs + kr[n1] * sn;
            kh[n1] = -kr[n0] * sn + kr[n1] * cs;
#endif
          }
        }
        float dqh[8], dkh[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          dqh[j] = fmaf(g, kh[j], uq[j]);
          dkh[j] = fmaf(g, qh[j], uk[j]);
          qb[j] += dqh[j];
          kb[j] += dkh[j];
        }
#if M3_CP_HEAD_CLUSTERS
        // Where this thread read dks and kr: no other thread reads those words.
        (void)tg;
        store_f32x8(s.t2 + M3_T_ROW(t) + 8 * o, dqh);
        store_f32x8(s.kr + M3_QK_ROW(t) + 8 * o, dkh);
#else
#if M3_CP_HALF_PARTIALS
        // live is the same for the row's 16 lanes (one token): they call it together.
        const long long row = static_cast<long long>(tg) * H + sh.h, rows = static_cast<long long>(p.T) * H;
        store_half_octet(p.ws_dqh, rows, row, o, tid, dqh);
        store_half_octet(p.ws_dkh, rows, row, o, tid, dkh);
#else
        const long long base = (static_cast<long long>(tg) * H + sh.h) * N + 8 * o;
#if !M3_CP_BACKWARD64Q
        store_f32x8(p.ws_dqh + base, dqh);
#endif
#if !M3_CP_BACKWARD64KV
        store_f32x8(p.ws_dkh + base, dkh);
#endif
        (void)base;
#endif
#endif
      }
#if M3_CP_TRIMS
      dscs[ps] = dsc;
    }
    group_sum_n<PASSES, OCT>(dscs);
#pragma unroll
    for (int ps = 0; ps < PASSES; ++ps) {
      if (ps * ROWS + r0 < len && o == 0) s.vv(kVecDsc)[ps * ROWS + r0] = dscs[ps];
    }
#else
#pragma unroll
      for (int off = OCT / 2; off > 0; off >>= 1) dsc += __shfl_xor_sync(0xffffffffu, dsc, off);
      if (live && o == 0) s.vv(kVecDsc)[t] = dsc;
    }
#endif
  }
#else
  // Per-token epilogue: a warp per token, a lane per rotary pair.
  for (int t = warp; t < len; t += NW) {
    const int tg = sh.start + a + t;
    const bool last_token = (a + t == sh.len - 1);
    const float dqk = -s.vv(kVecDyv)[t];
    const float g = dqk * gam[t];
    float dsc = 0.f;
#pragma unroll
    for (int m = 0; m < NPAIR / 32; ++m) {
      const int i2 = lane + 32 * m;
      const int n0 = 2 * i2, n1 = n0 + 1;
      const float dqr0 = s.t1[M3_T_ROW(t) + n0], dqr1 = s.t1[M3_T_ROW(t) + n1];
      const float dks0 = s.t2[M3_T_ROW(t) + n0], dks1 = s.t2[M3_T_ROW(t) + n1];
      const float kr0 = s.kr[M3_QK_AT(t, n0)], kr1 = s.kr[M3_QK_AT(t, n1)];
      const float qr0 = s.qr[M3_QK_AT(t, n0)], qr1 = s.qr[M3_QK_AT(t, n1)];
      dsc = fmaf(dks0, kr0, fmaf(dks1, kr1, dsc));
      float dkr0 = sc[t] * dks0, dkr1 = sc[t] * dks1;
      if (last_token && p.dfinal_k) {
        dkr0 += p.dfinal_k[(sh.seq * H + sh.h) * N + n0];
        dkr1 += p.dfinal_k[(sh.seq * H + sh.h) * N + n1];
      }
      float uq0 = dqr0, uq1 = dqr1, uk0 = dkr0, uk1 = dkr1;
      if (i2 < A) {
        s.dphi[t * LDA + i2] = qr0 * dqr1 - qr1 * dqr0 + kr0 * dkr1 - kr1 * dkr0;
        float sn, cs;
        m3_sincos(s.phi[t * LDA + i2], &sn, &cs);
        uq0 = dqr0 * cs + dqr1 * sn;
        uq1 = -dqr0 * sn + dqr1 * cs;
        uk0 = dkr0 * cs + dkr1 * sn;
        uk1 = -dkr0 * sn + dkr1 * cs;
      }
      const float qh0 = bf2f(p.q[static_cast<long long>(tg) * N + n0]) + p.q_bias[sh.h * N + n0];
      const float qh1 = bf2f(p.q[static_cast<long long>(tg) * N + n1]) + p.q_bias[sh.h * N + n1];
      const float kh0 = bf2f(p.k[static_cast<long long>(tg) * N + n0]) + p.k_bias[sh.h * N + n0];
      const float kh1 = bf2f(p.k[static_cast<long long>(tg) * N + n1]) + p.k_bias[sh.h * N + n1];
      const float dqh0 = fmaf(g, kh0, uq0), dqh1 = fmaf(g, kh1, uq1);
      const float dkh0 = fmaf(g, qh0, uk0), dkh1 = fmaf(g, qh1, uk1);
      const long long base = (static_cast<long long>(tg) * H + sh.h) * N;
      p.ws_dqh[base + n0] = dqh0;
      p.ws_dqh[base + n1] = dqh1;
      p.ws_dkh[base + n0] = dkh0;
      p.ws_dkh[base + n1] = dkh1;
      qb[2 * m] += dqh0;
      qb[2 * m + 1] += dqh1;
      kb[2 * m] += dkh0;
      kb[2 * m + 1] += dkh1;
    }
    dsc = warp_sum(dsc);
    if (lane == 0) s.vv(kVecDsc)[t] = dsc;
  }
#endif
  __syncthreads();
}

M3_DEV void backward_chunk(const M3Params& p, const SeqHead& sh, Smem& s, int j, int a, int len,
                           bool last_chunk, BackwardCarry& bc, float (&qb)[kBiasRegs],
                           float (&kb)[kBiasRegs]) {
  const int H = p.H;
  const int T = p.T;
  const int tid = M3_TID();
  const int warp = tid >> 5, lane = tid & 31;
  const int chunk = sh.chunk_base + j;
  const float* e = s.vv(kVecE);
  const float* qkraw = s.vv(kVecQkRaw);
  (void)T;
  (void)warp;
  (void)lane;
  (void)qkraw;
  backward_prepare(p, sh, s, chunk, a, len, p.ws_states + (static_cast<long long>(chunk) * H + sh.h) * P * N);
  backward_intra(p, sh, s, a, len);
  // dS <- alpha dS + sum_t e[t] dy[t] qr[t]^T, and da = alpha <dS, S_j> on the way.
  float da;
  float dc0 = 0.f;  // the gradient of c0 = (1 - p_0) dt_0; stays zero without initial states
  (void)dc0;
  {
    const float alpha = e[len - 1];
    StateTile upd;
    state_grad_contribution(s, upd);
    float part = 0.f;
#if M3_INITIAL_STATES
    // In the first chunk the updated dS is the gradient of the state entering the sequence,
    // E = ssm0 + c0 v0 k0^T with c0 = (1 - p_0) dt_0; <dE, v0 k0^T> is c0's gradient.
    const long long sh_row = static_cast<long long>(sh.seq) * H + sh.h;
    float part0 = 0.f;
    upd.for_each([&](int r, int c, float acc) {
      const float old = s.ds[r * LDN + c];
      part = fmaf(old, s.st[r * LDN + c], part);
      const float updated = alpha * old + acc;
      s.ds[r * LDN + c] = updated;
      if (a == 0) part0 = fmaf(updated, bf2f(p.init_v[sh_row * P + r]) * p.init_k[sh_row * N + c], part0);
    });
    da = alpha * block_sum<NT>(part, s.red);
    if (a == 0) dc0 = block_sum<NT>(part0, s.red);
#else
    upd.for_each([&](int r, int c, float acc) {
      const float old = s.ds[r * LDN + c];
      part = fmaf(old, s.st[r * LDN + c], part);
      s.ds[r * LDN + c] = alpha * old + acc;
    });
    da = alpha * block_sum<NT>(part, s.red);
#endif
  }
  backward_token_epilogue(p, sh, s, a, len, qb, kb);
#if M3_PARALLEL_SCALARS
  backward_token_scalars_parallel(p, sh, s, a, len, last_chunk, da, dc0, bc);
#else
  // Phi = reverse cumsum of dphi, carried across chunks; dangles follows from it.
  if (tid < A) {
    const int i = tid;
    float run = s.big_phi_carry()[i];
    for (int t = len - 1; t >= 0; --t) {
      const int tg = sh.start + a + t;
      run += s.dphi[t * LDA + i];
      if (a + t == sh.len - 1 && p.dfinal_angle) run += bf2f(p.dfinal_angle[(sh.seq * H + sh.h) * A + i]);
      s.dphi[t * LDA + i] = run;
      const float th = s.th[t * LDA + i];
      const float tnh = th / kM3Pi;
      p.dangles[(static_cast<long long>(tg) * H + sh.h) * A + i] =
          f2bf(run * s.vv(kVecDt)[t] * kM3Pi * (1.f - tnh * tnh));
    }
    s.big_phi_carry()[i] = run;
  }
  __syncthreads();
  if (tid < len) {
    float ang = 0.f;
    for (int i = 0; i < A; ++i) ang = fmaf(s.dphi[tid * LDA + i], s.th[tid * LDA + i], ang);
    s.vv(kVecAng)[tid] = ang;
  }
  __syncthreads();
  // Scalars per token, in reverse order on one thread: dadt's reverse cumsum and the one-token
  // shift of the gamma terms onto dt and trap.
  if (tid == 0) {
    const float* xs = s.vv(kVecXs);
    const float* uu = s.vv(kVecU);
    const float* rg = s.vv(kVecRowG);
    const float* cg = s.vv(kVecColG);
    const float* dsc = s.vv(kVecDsc);
    const float* ang = s.vv(kVecAng);
    const float* pv = s.vv(kVecP);
    const float* dtv = s.vv(kVecDt);
    const float* dyv = s.vv(kVecDyv);
    float sum_x = 0.f, sum_u = 0.f;
    for (int t = 0; t < len; ++t) {
      sum_x += xs[t];
      sum_u += uu[t];
      bc.dd_sum += dyv[t];
    }
    // The first token of the chunk after this one still waits for dgam of our last token.
    const float dgam_last = -dyv[len - 1] * qkraw[len - 1] + dsc[len - 1];
    if (!last_chunk) {
      const int tg = sh.start + a + len;
      const float pn = sigmoidf(bf2f(p.trap[sh.h * T + tg]));
      const float dtn = p.dt[sh.h * T + tg];
      const float ddt = bc.ddt_first + dgam_last * (1.f - pn);
      const float dp = bc.dp_first - dgam_last * dtn;
      p.ddt[sh.h * T + tg] = ddt;
      p.dtrap[sh.h * T + tg] = f2bf(dp * pn * (1.f - pn));
    }
    for (int t = len - 1; t >= 0; --t) {
      const int tg = sh.start + a + t;
      float dc = rg[t] - cg[t] + uu[t] - xs[t];
      if (t == len - 1) dc += sum_x + da + bc.dc_pending;
      bc.dadt_run += dc;
      p.dadt[sh.h * T + tg] = bc.dadt_run;
      float ddt = dsc[t] * pv[t] + ang[t];
      float dp = dsc[t] * dtv[t];
      if (t > 0) {
        const float dgam_prev = -dyv[t - 1] * qkraw[t - 1] + dsc[t - 1];
        ddt += dgam_prev * (1.f - pv[t]);
        dp -= dgam_prev * dtv[t];
      }
      if (t > 0 || a == 0) {
        p.ddt[sh.h * T + tg] = ddt;
        p.dtrap[sh.h * T + tg] = f2bf(dp * pv[t] * (1.f - pv[t]));
      } else {
        bc.ddt_first = ddt;
        bc.dp_first = dp;
      }
    }
    bc.dc_pending = -da - sum_u;
  }
  __syncthreads();
#endif
}

// Row `row` of the bias and skip gradient partials (dq_bias, dk_bias, dd), summed over the threads
// that own the same columns in a fixed order. Uses s.t1 as scratch. Without `with_dd` the row's dd
// word is left to the caller (M3_CP_EARLY_BIAS writes the bias sums before dd is known).
M3_DEV void write_bias_partials(const M3Params& p, Smem& s, long long row, const float (&qb)[kBiasRegs],
                                const float (&kb)[kBiasRegs], float dd_sum, bool with_dd = true) {
  const int tid = M3_TID();
#if M3_VECTOR_IO
  constexpr int kGroups = NT / (N / 8);
  {
    const int o = tid % (N / 8), grp = tid / (N / 8);
#if M3_CP_CONFLICT_FREE
    store_f32x8(s.t1 + grp * 2 * N + 8 * o, qb);
    store_f32x8(s.t1 + grp * 2 * N + N + 8 * o, kb);
#else
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      s.t1[grp * 2 * N + 8 * o + j] = qb[j];
      s.t1[grp * 2 * N + N + 8 * o + j] = kb[j];
    }
#endif
  }
#else
  constexpr int kGroups = NW;
  const int warp = tid >> 5, lane = tid & 31;
#pragma unroll
  for (int m = 0; m < NPAIR / 32; ++m) {
    const int n0 = 2 * (lane + 32 * m);
    s.t1[warp * 2 * N + n0] = qb[2 * m];
    s.t1[warp * 2 * N + n0 + 1] = qb[2 * m + 1];
    s.t1[warp * 2 * N + N + n0] = kb[2 * m];
    s.t1[warp * 2 * N + N + n0 + 1] = kb[2 * m + 1];
  }
#endif
  __syncthreads();
  float* part = p.ws_partial + row * (2 * N + 1);
  for (int c = tid; c < 2 * N; c += NT) {
    // The halves that m3_cp_backward64q (dq) and m3_cp_backward64kv (dk) have written.
    if ((M3_CP_BACKWARD64Q && c < N) || (M3_CP_BACKWARD64KV && c >= N)) continue;
    float acc = 0.f;
    for (int w = 0; w < kGroups; ++w) acc += s.t1[w * 2 * N + c];
    part[c] = acc;
  }
  if (with_dd && tid == 0) part[2 * N] = dd_sum;
}

}  // namespace m3scan

#ifndef M3_NO_SCAN_ENTRY
extern "C" __global__ void __launch_bounds__(M3_THREADS, 1)
    m3_chunk_scan(const M3Params p) {
  using namespace m3scan;
  extern __shared__ float4 smem_raw[];
  Smem s = carve(reinterpret_cast<float*>(smem_raw));
  const SeqHead sh = locate(p);
  const int H = p.H;
  const int tid = M3_TID();
  const long long sh_row = static_cast<long long>(sh.seq) * H + sh.h;

  // Forward walk.
#if M3_INITIAL_STATES
  // The previous call's last token left its b-term for our first token: the state entering the
  // sequence is E = ssm0 + (1 - p_0) dt_0 v0 k0^T, and the angle sum continues from angle0.
  float c0 = 0.f;
  if (sh.len > 0) {
    const float p0 = sigmoidf(bf2f(p.trap[sh.h * p.T + sh.start]));
    c0 = (1.f - p0) * p.dt[sh.h * p.T + sh.start];
  }
  for (int e = tid; e < P * N; e += NT) {
    const int r = e / N, c = e % N;
    s.st[r * LDN + c] = fmaf(c0 * bf2f(p.init_v[sh_row * P + r]), p.init_k[sh_row * N + c], p.init_ssm[sh_row * P * N + e]);
  }
  if (tid < A) s.phi_carry()[tid] = wrap_angle(bf2f(p.init_angle[sh_row * A + tid]));
#else
  for (int e = tid; e < P * N; e += NT) s.st[(e / N) * LDN + (e % N)] = 0.f;
  if (tid < A) s.phi_carry()[tid] = 0.f;
#endif
  __syncthreads();
  const int nchunks = (sh.len + C - 1) / C;
  for (int j = 0; j < nchunks; ++j) {
    const int a = j * C;
    forward_chunk(p, sh, s, j, a, min(C, sh.len - a));
  }
#if M3_INITIAL_STATES
  // Final states; an empty sequence passes its initial states through (the angle wrapped).
  for (int e = tid; e < P * N; e += NT) p.final_ssm[sh_row * P * N + e] = s.st[(e / N) * LDN + (e % N)];
  if (tid < A) p.final_angle[sh_row * A + tid] = f2bf(s.phi_carry()[tid]);
  if (tid < N) {
    const int lt = (sh.len - 1) % C;
    p.final_k[sh_row * N + tid] = sh.len > 0 ? s.kr[M3_QK_AT(lt, tid)] : p.init_k[sh_row * N + tid];
  }
  if (tid < P) {
    p.final_v[sh_row * P + tid] =
        sh.len > 0 ? p.v[(static_cast<long long>(sh.start + sh.len - 1) * H + sh.h) * P + tid]
                   : p.init_v[sh_row * P + tid];
  }
#else
  // Final states; an empty sequence leaves them zero.
  for (int e = tid; e < P * N; e += NT) p.final_ssm[sh_row * P * N + e] = s.st[(e / N) * LDN + (e % N)];
  if (tid < A) {
    p.final_angle[sh_row * A + tid] =
        f2bf(sh.len > 0 ? s.phi_carry()[tid] : 0.f);
  }
  if (tid < N) {
    const int lt = (sh.len - 1) % C;
    p.final_k[sh_row * N + tid] = sh.len > 0 ? s.kr[M3_QK_AT(lt, tid)] : 0.f;
  }
  if (tid < P) {
    p.final_v[sh_row * P + tid] =
        sh.len > 0 ? p.v[(static_cast<long long>(sh.start + sh.len - 1) * H + sh.h) * P + tid]
                   : static_cast<m3_bf16>(0);
  }
#endif
  __syncthreads();

  // Backward walk.
  // Forward only (the training op's forward): the results above are all it needs.
  if (p.forward_only) return;

  for (int e = tid; e < P * N; e += NT) {
    s.ds[(e / N) * LDN + (e % N)] = p.dfinal_ssm ? p.dfinal_ssm[sh_row * P * N + e] : 0.f;
  }
  if (tid < A) s.big_phi_carry()[tid] = 0.f;
  BackwardCarry bc{0.f, 0.f, 0.f, 0.f, 0.f};
  float qb[kBiasRegs] = {}, kb[kBiasRegs] = {};
  __syncthreads();
  for (int j = nchunks - 1; j >= 0; --j) {
    const int a = j * C;
    backward_chunk(p, sh, s, j, a, min(C, sh.len - a), j == nchunks - 1, bc, qb, kb);
  }
#if M3_INITIAL_STATES
  // Gradients of the initial states. s.ds now holds dE; k0 and v0 enter only through E = ssm0 +
  // c0 v0 k0^T (final_k and final_v come from the tokens), the angle state through every phi.
  // An empty sequence passes the final-state cotangents straight back.
  for (int e = tid; e < P * N; e += NT) p.d_init_ssm[sh_row * P * N + e] = s.ds[(e / N) * LDN + (e % N)];
  if (tid < A) {
    p.d_init_angle[sh_row * A + tid] =
        sh.len > 0 ? f2bf(s.big_phi_carry()[tid]) : (p.dfinal_angle ? p.dfinal_angle[sh_row * A + tid] : m3_bf16(0));
  }
  if (tid < P) {
    float acc = 0.f;
    for (int c = 0; c < N; ++c) acc = fmaf(s.ds[tid * LDN + c], p.init_k[sh_row * N + c], acc);
    p.d_init_v[sh_row * P + tid] =
        sh.len > 0 ? f2bf(c0 * acc) : (p.dfinal_v ? p.dfinal_v[sh_row * P + tid] : m3_bf16(0));
  }
  if (tid < N) {
    float acc = 0.f;
    for (int r = 0; r < P; ++r) acc = fmaf(s.ds[r * LDN + tid], bf2f(p.init_v[sh_row * P + r]), acc);
    p.d_init_k[sh_row * N + tid] = sh.len > 0 ? c0 * acc : (p.dfinal_k ? p.dfinal_k[sh_row * N + tid] : 0.f);
  }
#endif
  write_bias_partials(p, s, sh_row, qb, kb, bc.dd_sum);
}
#endif  // M3_NO_SCAN_ENTRY
