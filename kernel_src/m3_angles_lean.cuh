// m3_cp_angles with fewer of its round trips in a row (M3_CP_LEAN_ANGLES, v158). Included by
// m3_chunk_parallel.cuh in place of v83's kernel; the same sums in the same order, so every result
// is bitwise v83's (and so v148's and v154's).
//
// v83's CTA of one (sequence, head) waited on memory five times in a row: cu_seqlens, a warp's
// chunk rows (once per chunk of the warp: each chunk's loads were issued only after the previous
// chunk's sums), the chunk totals read back from the workspace for the scan, the ticket tables'
// cu_seqlens walks (CTA (0, 0) only, after its scan), and the final-state gradient's reorder. Here
// the reorder's loads and a warp's first chunk rows leave together, the reorder's stores and the
// ticket tables are done while the rows travel, a warp's next chunk rows are loaded before the
// current chunk is summed, and the scan's first 32 chunks come from shared memory.
#pragma once

#if !M3_CP_LEAN_ANGLES
#error "m3_angles_lean.cuh is m3_cp_angles of M3_CP_LEAN_ANGLES"
#endif

namespace m3cp {

// A warp's rows of one chunk: lane l holds 16-byte quarter l % 4 of the angle rows of tokens
// 8 i + l / 4, and those tokens' dt (zeros past the sequence).
struct ChunkAngleRows {
  uint4 raw[4];
  float dt[4];
};

M3_DEV ChunkAngleRows load_chunk_angle_rows(const M3Params& p, const SeqHead& sh, int j) {
  const int lane = threadIdx.x & 31;
  const int a = j * C, len = min(C, sh.len - a);
  const long long token_stride = static_cast<long long>(p.H) * A;
  const m3_bf16* rows = p.angles + (static_cast<long long>(sh.start + a) * p.H + sh.h) * A + 8 * (lane & 3);
  const float* dts = p.dt + static_cast<long long>(sh.h) * p.T + sh.start + a;
  ChunkAngleRows r;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int t = 8 * i + (lane >> 2);
    r.raw[i] = t < len ? *reinterpret_cast<const uint4*>(rows + t * token_stride) : make_uint4(0u, 0u, 0u, 0u);
    r.dt[i] = t < len ? dts[t] : 0.f;
  }
  return r;
}

// Lane a's total of pi tanh(angle) dt over the chunk's tokens for angle index a, in token order
// with fused multiply-adds: the products pass through the warp's shared tile (rows padded to 36
// words: the quarters' 16-byte stores are conflict-free).
M3_DEV float chunk_angle_total(const ChunkAngleRows& r, float (*products)[A + 4], float* token_dt) {
  static_assert(C == 32 && A == 32, "a warp's lanes cover a chunk's 32 tokens as 8 x 4 row quarters");
  const int lane = threadIdx.x & 31, quarter = lane & 3;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int t = 8 * i + (lane >> 2);
    const unsigned w[4] = {r.raw[i].x, r.raw[i].y, r.raw[i].z, r.raw[i].w};
    float y[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      // Element e of the quarter: the low half of word e / 2 first (little-endian bf16 pairs).
      const unsigned bits = (e & 1) ? (w[e >> 1] & 0xffff0000u) : (w[e >> 1] << 16);
      y[e] = kM3Pi * m3_tanhf(__uint_as_float(bits));
    }
    float4* dst = reinterpret_cast<float4*>(&products[t][8 * quarter]);
    dst[0] = make_float4(y[0], y[1], y[2], y[3]);
    dst[1] = make_float4(y[4], y[5], y[6], y[7]);
    if (quarter == 0) token_dt[t] = r.dt[i];
  }
  __syncwarp();
  float total = 0.f;
#pragma unroll
  for (int t = 0; t < C; ++t) total = fmaf(products[t][lane], token_dt[t], total);
  __syncwarp();  // every lane has read the products before the next chunk's overwrite them
  return total;
}

// The final state's gradient in fragment order, the order the backward reads every state
// gradient in: thread tid's words tid + u NT, loaded all at once, stored later.
// (An enumerator, not a constexpr variable: those become device globals and move every other
// global's address, and with it the other kernels' code.)
enum : int { kReorderWords = P * N / 4 / NT };
static_assert(kReorderWords * NT == P * N / 4, "the words split evenly over the threads");

M3_DEV void load_reordered_gradient(const float* src, float4 (&w)[kReorderWords]) {
#pragma unroll
  for (int u = 0; u < kReorderWords; ++u) {
    const int q = threadIdx.x + u * NT;
    const int r = q / (N / 4), pos = 4 * (q % (N / 4));
    const float* in = src + r * N + (pos & ~31) + frag_col((pos & 31) >> 2);  // columns frag_col(w) + 8 i
    w[u] = make_float4(in[0], in[8], in[16], in[24]);
  }
}

// Entry q of the two ticket tables (the 32-token jobs', then the chunk-64 forward's two-chunk
// jobs' where the module has that forward): {seq, round, start, unused}, {len, chunk_base (in
// chunks of C), unused, unused}; seq -1 past the last job.
M3_DEV void write_ticket_entry(const M3Params& p, int q, int chunk, int* table) {
  int s = -1, round = 0;
  if (!M3_TICKET_ORDER(p.cu_seqlens, p.S, chunk, q, s, round)) s = -1;
  const SeqHead sh = s >= 0 ? seq_head(p, s, 0) : SeqHead{0, -1, 0, 0, 0};
  int4* entry = reinterpret_cast<int4*>(table + kScheduleInts * q);
  entry[0] = make_int4(s, round, sh.start, 0);
  entry[1] = make_int4(sh.len, sh.chunk_base, 0, 0);
}

}  // namespace m3cp

// The angle sum entering every chunk of one (sequence, head) into ws_phi, the final angle state,
// and zero final states for an empty sequence. Grid (H, S).
extern "C" __global__ void __launch_bounds__(M3_THREADS) m3_cp_angles(const M3Params p) {
  using namespace m3cp;
  m3_allow_next_kernel();
  const int h = blockIdx.x, seq = blockIdx.y, H = p.H;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  {
    // The tickets and ready flags the next two kernels start from (everything up to the last tail
    // flag, and the heads-done counts), zeroed here on the stream: no memset for the host to issue.
    const long long words = (tail_flags(p) - p.ws_sync) + static_cast<long long>(p.chunk_capacity) * H +
                            (M3_CP_FUSED_HEADS || M3_CP_OVERLAPPED_REDUCE ? p.chunk_capacity : 0);
    const long long first = (static_cast<long long>(blockIdx.y) * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;
    const long long stride = static_cast<long long>(gridDim.x) * gridDim.y * blockDim.x;
    for (long long i = first; i < words; i += stride) p.ws_sync[i] = 0;
  }
  const SeqHead sh = seq_head(p, seq, h);
  const int chunks = (sh.len + C - 1) / C;
  const long long row = static_cast<long long>(seq) * H + h;
  __shared__ __align__(16) float products[NW][C][A + 4];
  __shared__ float token_dt[NW][C];
  __shared__ float first_totals[32][A + 1];  // chunks 0-31; odd rows: the scan's column reads meet 32 banks

  // The final state's gradient goes to the slot after the sequence's last chunk (the workspace has
  // one to spare); its loads leave with the first chunk rows'.
  const bool reorders = chunks > 0 && p.dfinal_ssm && !p.forward_only;
  float4 gradient_words[kReorderWords];
  if (reorders) load_reordered_gradient(p.dfinal_ssm + row * P * N, gradient_words);
  ChunkAngleRows next;
  if (warp < chunks) next = load_chunk_angle_rows(p, sh, warp);
  if (reorders) {
    float4* dst = reinterpret_cast<float4*>(p.ws_dstates + (static_cast<long long>(sh.chunk_base + chunks) * H + h) * P * N);
#pragma unroll
    for (int u = 0; u < kReorderWords; ++u) dst[threadIdx.x + u * NT] = gradient_words[u];
  }
  if (h == 0 && seq == 0) {
    for (int q = threadIdx.x; q < p.chunk_capacity; q += NT) {
      write_ticket_entry(p, q, C, p.ws_schedule);
#if M3_CP_FORWARD64
      write_ticket_entry(p, q, 2 * C, p.ws_schedule + kScheduleInts * p.chunk_capacity);
#endif
    }
  }

  // Chunk totals, a warp per chunk; the rows of a warp's next chunk are in flight meanwhile.
  float* slots = p.ws_phi + (static_cast<long long>(sh.chunk_base) * H + h) * A;
  const long long stride = static_cast<long long>(H) * A;
  for (int j = warp; j < chunks; j += NW) {
    const ChunkAngleRows rows = next;
    if (j + NW < chunks) next = load_chunk_angle_rows(p, sh, j + NW);
    const float total = chunk_angle_total(rows, products[warp], token_dt[warp]);
    slots[j * stride + lane] = total;
    if (j < 32) first_totals[j][lane] = total;
  }
  __syncthreads();

  // The sums entering the chunks by warp scans in double, 32 chunks a pass, the angle indices
  // spread over the warps (lane = chunk): each sum wrapped once, in double the unwrapped sum (a
  // few 10^4 rad at most) keeps far more bits than the fp32 result shows.
  constexpr int K = A / NW;
  static_assert(K * NW == A, "angle indices must split evenly over the warps");
  double carry[K];
#pragma unroll
  for (int u = 0; u < K; ++u) carry[u] = 0.0;
  for (int j0 = 0; j0 < chunks; j0 += 32) {
    const int j = j0 + lane;
    double x[K];
#pragma unroll
    for (int u = 0; u < K; ++u) {
      const int i = warp + u * NW;
      x[u] = j >= chunks ? 0.0 : static_cast<double>(j0 == 0 ? first_totals[lane][i] : slots[j * stride + i]);
    }
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
#pragma unroll
      for (int u = 0; u < K; ++u) {
        const double y = __shfl_up_sync(0xffffffffu, x[u], o);
        if (lane >= o) x[u] += y;
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
  if (lane == 0) {
#pragma unroll
    for (int u = 0; u < K; ++u) {
      const float fin = static_cast<float>(wrap_angle_double(carry[u]));
      p.final_angle[row * A + warp + u * NW] = f2bf(chunks > 0 ? fin : 0.f);
    }
  }
  if (sh.len == 0) {
    for (int e = threadIdx.x; e < P * N; e += NT) p.final_ssm[row * P * N + e] = 0.f;
    for (int e = threadIdx.x; e < N; e += NT) p.final_k[row * N + e] = 0.f;
    for (int e = threadIdx.x; e < P; e += NT) p.final_v[row * P + e] = static_cast<m3_bf16>(0);
  }
}
