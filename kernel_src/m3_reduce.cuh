// The cross-head and cross-sequence sums that the scan leaves as fp32 partials. A fixed
// summation order keeps the results bitwise repeatable.
#pragma once

#include "m3_common.cuh"
#include "m3_schedule.cuh"

#if !defined(M3_N) || !defined(M3_THREADS)
#error "m3_reduce.cuh needs M3_N and M3_THREADS"
#endif

// M3_REDUCE_WIDE (v37): the head sums four columns per thread in 16-byte loads, eight heads
// unrolled (the same order per column: dq and dk bitwise unchanged); the partials' sums spread
// over (head, 32 columns) blocks whose warps take every eighth row, instead of one block per head
// walking some 150 rows per thread (20 us on c01 for 5 MB, run 35).
#ifndef M3_REDUCE_WIDE
#define M3_REDUCE_WIDE 0
#endif
// M3_REDUCE_HEAD_PARTS (v53): the backward left p.head_parts rows per token instead of p.H.
#ifndef M3_REDUCE_HEAD_PARTS
#define M3_REDUCE_HEAD_PARTS 0
#endif
#if M3_REDUCE_HEAD_PARTS && !M3_REDUCE_WIDE
#error "M3_REDUCE_HEAD_PARTS is wired into the wide reduce kernels only"
#endif
// The M3Params field that counts a token's rows of dq and dk partials.
#if M3_REDUCE_HEAD_PARTS
#define M3_HEAD_ROWS head_parts
#else
#define M3_HEAD_ROWS H
#endif
#if M3_PDL && !M3_REDUCE_WIDE
#error "M3_PDL is wired into the wide reduce kernels only"
#endif
// M3_REDUCE_ONE_LAUNCH (v87): m3_reduce_all, the head sums and the partials' sums in one grid.
#ifndef M3_REDUCE_ONE_LAUNCH
#define M3_REDUCE_ONE_LAUNCH 0
#endif
#if M3_REDUCE_ONE_LAUNCH && (!M3_REDUCE_WIDE || M3_PDL || M3_REDUCE_HEAD_PARTS)
#error "M3_REDUCE_ONE_LAUNCH joins the wide reduce kernels, without PDL or head parts"
#endif
// M3_REDUCE_CHUNK_READY (v101): m3_reduce_all launched programmatically while the backward's last
// wave runs (M3_CP_OVERLAPPED_REDUCE). Its head-sum blocks come first, in the backward's ticket
// order (the order in which chunks finish), C / 8 blocks per entry of the ticket table; each waits
// for that entry's heads-done count to reach H and reads the partials through L2. The partials'
// sums need every chunk's row and wait for the whole backward grid (griddepcontrol.wait). Each
// output is summed as m3_reduce_heads sums it: the same bits.
#ifndef M3_REDUCE_CHUNK_READY
#define M3_REDUCE_CHUNK_READY 0
#endif
#if M3_REDUCE_CHUNK_READY && (!M3_REDUCE_ONE_LAUNCH || !defined(M3_CHUNK))
#error "M3_REDUCE_CHUNK_READY reorders m3_reduce_all and needs M3_CHUNK"
#endif
// M3_REDUCE_DISCARD (v105): the head-sum blocks drop the partials they have summed from L2 (one
// block's tokens are a contiguous run of rows), so that those still dirty there are not written
// back to HBM.
#ifndef M3_REDUCE_DISCARD
#define M3_REDUCE_DISCARD 0
#endif
#if M3_REDUCE_DISCARD && !M3_REDUCE_CHUNK_READY
#error "M3_REDUCE_DISCARD is wired into the chunk-ready reduce"
#endif
// M3_REDUCE_INLINE_AHEAD=K (v107): the backward has summed every chunk but the first K of each
// sequence (M3_CP_INLINE_HEAD_SUMS) and counts heads by chunk index; the head-sum blocks take the
// rest.
#ifndef M3_REDUCE_INLINE_AHEAD
#define M3_REDUCE_INLINE_AHEAD 0
#endif
#if M3_REDUCE_INLINE_AHEAD && (!M3_REDUCE_CHUNK_READY || M3_REDUCE_DISCARD)
#error "M3_REDUCE_INLINE_AHEAD is wired into the chunk-ready reduce without its discards"
#endif
// M3_REDUCE_DEEP_LOADS (v161): the reduce's tail after the backward (2 to 12 us a call, run 109)
// with fewer round trips in a row: a partials block's warp loads up to 24 of its rows at once (c01's
// 150 rows: one round trip a warp where unroll 4 made five), and a head-sum thread 8 heads' dq and
// dk rows at once (sum_heads_x4). The same additions in the same order: the same bits.
#ifndef M3_REDUCE_DEEP_LOADS
#define M3_REDUCE_DEEP_LOADS 0
#endif
#if M3_REDUCE_DEEP_LOADS && !M3_REDUCE_CHUNK_READY
#error "M3_REDUCE_DEEP_LOADS is wired into the chunk-ready reduce"
#endif
// M3_REDUCE_HALF_PARTIALS (v254): the backward's per-head dq/dk rows arrive in half, each row times a
// power of two whose inverse follows the halves (store_half_octet in m3_chunk_scan.cuh): a head-sum
// thread loads 8 bytes a head instead of 16, and the row's inverse (one word for the token's 32
// threads), and sums the widened terms in head order as before.
#ifndef M3_REDUCE_HALF_PARTIALS
#define M3_REDUCE_HALF_PARTIALS 0
#endif
#if M3_REDUCE_HALF_PARTIALS && (!M3_REDUCE_CHUNK_READY || !M3_REDUCE_DEEP_LOADS || M3_REDUCE_DISCARD || \
                                M3_REDUCE_INLINE_AHEAD || M3_REDUCE_HEAD_PARTS)
#error "M3_REDUCE_HALF_PARTIALS is wired into v161's chunk-ready reduce with deep loads"
#endif

#if M3_REDUCE_HALF_PARTIALS
// sum_heads_x4 for half rows: columns n .. n + 3 of each head's row of token t, each head's term
// widened and times its row's inverse scale (exact: a half times a power of two), added in head
// order, 8 heads' loads in flight.
M3_DEV void sum_half_heads_x4(const M3Params& p, long long t, int n, m3_bf16* dq, m3_bf16* dk) {
  constexpr int B = 8;
  const int H = p.H;
  const long long rows = static_cast<long long>(p.T) * H, row0 = t * H;
  const unsigned* qh = reinterpret_cast<const unsigned*>(p.ws_dqh);
  const unsigned* kh = reinterpret_cast<const unsigned*>(p.ws_dkh);
  const float* qs = p.ws_dqh + rows * M3_N / 2;
  const float* ks = p.ws_dkh + rows * M3_N / 2;
  float4 aq = make_float4(0.f, 0.f, 0.f, 0.f), ak = aq;
  for (int h0 = 0; h0 < H; h0 += B) {
    uint2 x[B], y[B];
    float fx[B], fy[B];
#pragma unroll
    for (int k = 0; k < B; ++k) {
      const bool in = h0 + k < H;  // past the last head: never added
      const long long row = row0 + h0 + k;
      x[k] = in ? __ldcg(reinterpret_cast<const uint2*>(qh + (row * M3_N + n) / 2)) : make_uint2(0u, 0u);
      y[k] = in ? __ldcg(reinterpret_cast<const uint2*>(kh + (row * M3_N + n) / 2)) : make_uint2(0u, 0u);
      fx[k] = in ? __ldcg(qs + row) : 0.f;
      fy[k] = in ? __ldcg(ks + row) : 0.f;
    }
#pragma unroll
    for (int k = 0; k < B; ++k) {
      if (h0 + k < H) {
        const float2 q01 = h2f_pair(x[k].x), q23 = h2f_pair(x[k].y);
        const float2 k01 = h2f_pair(y[k].x), k23 = h2f_pair(y[k].y);
        aq.x += fx[k] * q01.x, aq.y += fx[k] * q01.y, aq.z += fx[k] * q23.x, aq.w += fx[k] * q23.y;
        ak.x += fy[k] * k01.x, ak.y += fy[k] * k01.y, ak.z += fy[k] * k23.x, ak.w += fy[k] * k23.y;
      }
    }
  }
  const auto pack = [](float4 v) { return make_uint2(f2bf_pair(v.x, v.y), f2bf_pair(v.z, v.w)); };
  *reinterpret_cast<uint2*>(dq) = pack(aq);
  *reinterpret_cast<uint2*>(dk) = pack(ak);
}
#endif

#if M3_REDUCE_WIDE
// Block `block` of the head sums: T * N / 4 threads in all.
M3_DEV void reduce_heads_block(const M3Params& p, unsigned block) {
  static_assert(M3_N % 4 == 0, "four columns per thread");
  constexpr int QUADS = M3_N / 4;
  const long long idx = static_cast<long long>(block) * M3_THREADS + threadIdx.x;
  if (idx >= static_cast<long long>(p.T) * QUADS) return;
  const long long t = idx / QUADS;
  const int n = 4 * static_cast<int>(idx % QUADS);
  const float4* q = reinterpret_cast<const float4*>(p.ws_dqh + t * p.M3_HEAD_ROWS * M3_N + n);
  const float4* k = reinterpret_cast<const float4*>(p.ws_dkh + t * p.M3_HEAD_ROWS * M3_N + n);
  float4 aq = make_float4(0.f, 0.f, 0.f, 0.f), ak = aq;
#pragma unroll 8
  for (int h = 0; h < p.M3_HEAD_ROWS; ++h) {
    const float4 x = q[h * QUADS], y = k[h * QUADS];
    aq.x += x.x, aq.y += x.y, aq.z += x.z, aq.w += x.w;
    ak.x += y.x, ak.y += y.y, ak.z += y.z, ak.w += y.w;
  }
  const auto pack = [](float4 v) {
    return make_uint2(static_cast<unsigned>(f2bf(v.x)) | (static_cast<unsigned>(f2bf(v.y)) << 16),
                      static_cast<unsigned>(f2bf(v.z)) | (static_cast<unsigned>(f2bf(v.w)) << 16));
  };
  *reinterpret_cast<uint2*>(p.dq + t * M3_N + n) = pack(aq);
  *reinterpret_cast<uint2*>(p.dk + t * M3_N + n) = pack(ak);
}

extern "C" __global__ void __launch_bounds__(M3_THREADS)
    m3_reduce_heads(const M3Params p) {
  m3_wait_for_previous_kernel();  // the backward's per-head partials
  m3_allow_next_kernel();
  reduce_heads_block(p, blockIdx.x);
}

// Head h, columns 32 col_block .. + 31 of the partials' sums: lane = column, warp w sums rows w,
// w + NW, ... in order; the warps' sums are then added in warp order.
M3_DEV void reduce_partials_block(const M3Params& p, int h, int col_block) {
  constexpr int NW = M3_THREADS / 32, COLS = 2 * M3_N + 1;
  __shared__ float warp_sums[NW][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int c = col_block * 32 + lane;
  float acc = 0.f;
  if (c < COLS) {
#if M3_REDUCE_DEEP_LOADS
    constexpr int kRows = 24;
    for (int s0 = warp; s0 < p.partial_rows; s0 += kRows * NW) {
      float row[kRows];
#pragma unroll
      for (int k = 0; k < kRows; ++k) {
        const int s = s0 + k * NW;
        row[k] = s < p.partial_rows ? p.ws_partial[(static_cast<long long>(s) * p.H + h) * COLS + c] : 0.f;
      }
#pragma unroll
      for (int k = 0; k < kRows; ++k) {
        if (s0 + k * NW < p.partial_rows) acc += row[k];
      }
    }
#else
#pragma unroll 4
    for (int s = warp; s < p.partial_rows; s += NW) acc += p.ws_partial[(static_cast<long long>(s) * p.H + h) * COLS + c];
#endif
  }
  warp_sums[warp][lane] = acc;
  __syncthreads();
  if (warp != 0 || c >= COLS) return;
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < NW; ++w) total += warp_sums[w][lane];
  if (c < M3_N) {
    p.dq_bias[h * M3_N + c] = total;
  } else if (c < 2 * M3_N) {
    p.dk_bias[h * M3_N + c - M3_N] = total;
  } else {
    p.dd[h] = total;
  }
}

// Grid (H, ceil((2N + 1) / 32)).
extern "C" __global__ void __launch_bounds__(M3_THREADS)
    m3_reduce_partials(const M3Params p) {
  m3_wait_for_previous_kernel();  // m3_reduce_heads, and through it the backward's partials
  reduce_partials_block(p, blockIdx.x, blockIdx.y);
}

#if M3_REDUCE_CHUNK_READY
// The dq/dk head sums of the tokens of one chunk that block `block` covers, once the backward's H
// CTAs of that chunk have counted their partials in.
M3_DEV void reduce_ready_chunk_block(const M3Params& p, unsigned block) {
  constexpr int QUADS = M3_N / 4, TOKENS = M3_THREADS / QUADS, BLOCKS_PER_CHUNK = M3_CHUNK / TOKENS;
  static_assert(TOKENS * QUADS == M3_THREADS && BLOCKS_PER_CHUNK * TOKENS == M3_CHUNK, "whole tokens per block");
  const long long q = block / BLOCKS_PER_CHUNK;
  const int4* entry = reinterpret_cast<const int4*>(p.ws_schedule + kM3RichScheduleInts * q);
  const int4 first = entry[0], second = entry[1];
  const int seq = first.x, round = first.y, start = first.z, len = second.x;
  if (seq < 0) return;  // past the last chunk: the same for every thread of the block
  const int j = m3_backward_chunk(len, M3_CHUNK, round);
#if M3_REDUCE_INLINE_AHEAD
  if (j >= M3_REDUCE_INLINE_AHEAD) return;  // summed by the backward
  const long long counted = second.y + j;    // by chunk index
#else
  const long long counted = q;  // by ticket entry
#endif
  if (threadIdx.x == 0) m3_wait_for_count<256>(p.ws_sync + m3_heads_done_offset(p.chunk_capacity, p.H) + counted, p.H);
  __syncthreads();
  const int token0 = static_cast<int>(block % BLOCKS_PER_CHUNK) * TOKENS;  // the block's first token
  const int t_local = token0 + static_cast<int>(threadIdx.x) / QUADS;
  const long long row = static_cast<long long>(p.H) * M3_N;
  if (j * M3_CHUNK + t_local < len) {
    const long long t = start + j * M3_CHUNK + t_local;
    const int n = 4 * (static_cast<int>(threadIdx.x) % QUADS);
#if M3_REDUCE_HALF_PARTIALS
    sum_half_heads_x4(p, t, n, p.dq + t * M3_N + n, p.dk + t * M3_N + n);
    (void)row;
#else
    sum_heads_x4<QUADS, M3_REDUCE_DEEP_LOADS ? 8 : 0>(reinterpret_cast<const float4*>(p.ws_dqh + t * row + n),
                        reinterpret_cast<const float4*>(p.ws_dkh + t * row + n), p.H, p.dq + t * M3_N + n,
                        p.dk + t * M3_N + n);
#endif
  }
#if M3_REDUCE_DISCARD
  __syncthreads();  // every thread's partials read
  const int tokens = min(TOKENS, len - j * M3_CHUNK - token0);
  if (tokens <= 0) return;
  const long long t0 = start + j * M3_CHUNK + token0;
  const long long lines = tokens * row / 32;  // 128-byte lines of each of dqh and dkh
  for (long long i = threadIdx.x; i < lines; i += M3_THREADS) {
    discard_l2_line(p.ws_dqh + t0 * row + 32 * i);
    discard_l2_line(p.ws_dkh + t0 * row + 32 * i);
  }
#endif
}

// Grid: chunk_capacity * C / 8 head-sum blocks, then H * ceil((2N + 1) / 32) partials blocks.
extern "C" __global__ void __launch_bounds__(M3_THREADS)
    m3_reduce_all(const M3Params p) {
  constexpr int BLOCKS_PER_CHUNK = M3_CHUNK * (M3_N / 4) / M3_THREADS;
  const unsigned head_blocks = static_cast<unsigned>(p.chunk_capacity) * BLOCKS_PER_CHUNK;
  if (blockIdx.x < head_blocks) {
    reduce_ready_chunk_block(p, blockIdx.x);
  } else {
    m3_wait_for_previous_kernel<true>();  // every chunk's partials row
    const unsigned b = blockIdx.x - head_blocks;
    reduce_partials_block(p, static_cast<int>(b % p.H), static_cast<int>(b / p.H));
  }
}
#elif M3_REDUCE_ONE_LAUNCH
// Both sums in one grid, the H * ceil((2N + 1) / 32) partials blocks first (each walks every
// chunk's row, the longer blocks), then the T * N / 4 threads of the head sums: the two read
// disjoint partials and write disjoint results, and one launch less saves its gap and the
// partials kernel's tail (2 to 5 us a call, run 58).
extern "C" __global__ void __launch_bounds__(M3_THREADS)
    m3_reduce_all(const M3Params p) {
  constexpr int COL_BLOCKS = (2 * M3_N + 1 + 31) / 32;
  const unsigned partial_blocks = static_cast<unsigned>(p.H) * COL_BLOCKS;
  if (blockIdx.x < partial_blocks) {
    reduce_partials_block(p, static_cast<int>(blockIdx.x % p.H), static_cast<int>(blockIdx.x / p.H));
  } else {
    reduce_heads_block(p, blockIdx.x - partial_blocks);
  }
}
#endif
#else
// dq[t][n] = sum over heads of dqh[t][h][n]; likewise dk. One thread per (token, n).
extern "C" __global__ void __launch_bounds__(M3_THREADS)
    m3_reduce_heads(const M3Params p) {
  const long long idx = static_cast<long long>(blockIdx.x) * M3_THREADS + threadIdx.x;
  if (idx >= static_cast<long long>(p.T) * M3_N) return;
  const long long t = idx / M3_N;
  const int n = static_cast<int>(idx % M3_N);
  const float* q = p.ws_dqh + t * p.H * M3_N + n;
  const float* k = p.ws_dkh + t * p.H * M3_N + n;
  float aq = 0.f, ak = 0.f;
  for (int h = 0; h < p.H; ++h) {
    aq += q[h * M3_N];
    ak += k[h * M3_N];
  }
  p.dq[idx] = f2bf(aq);
  p.dk[idx] = f2bf(ak);
}

// dq_bias, dk_bias and dd: sums of the partials, one row per sequence (walkers) or per chunk
// (chunk-parallel), partial_rows in all.
// One block per head, one thread per output column.
extern "C" __global__ void __launch_bounds__(M3_THREADS)
    m3_reduce_partials(const M3Params p) {
  const int h = blockIdx.x;
  for (int c = threadIdx.x; c < 2 * M3_N + 1; c += M3_THREADS) {
    float acc = 0.f;
    for (int s = 0; s < p.partial_rows; ++s) {
      acc += p.ws_partial[(static_cast<long long>(s) * p.H + h) * (2 * M3_N + 1) + c];
    }
    if (c < M3_N) {
      p.dq_bias[h * M3_N + c] = acc;
    } else if (c < 2 * M3_N) {
      p.dk_bias[h * M3_N + c - M3_N] = acc;
    } else {
      p.dd[h] = acc;
    }
  }
}
#endif  // M3_REDUCE_WIDE
