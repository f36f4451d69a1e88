// The cross-head and cross-sequence sums that the scan leaves as fp32 partials. A fixed
// summation order keeps the results bitwise repeatable.
#pragma once

#include "m3_common.cuh"

#if !defined(M3_N) || !defined(M3_THREADS)
#error "m3_reduce.cuh needs M3_N and M3_THREADS"
#endif

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
