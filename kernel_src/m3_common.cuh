// Device helpers shared by the operator kernels: bf16 conversion, warp reductions and scans,
// and a register-tiled block matrix product over shared-memory operands.
#pragma once

#include "m3_params.cuh"

#define M3_DEV __device__ __forceinline__

static constexpr float kM3Pi = 3.14159265358979323846f;
static constexpr float kM3TwoPi = 6.28318530717958647692f;

M3_DEV float bf2f(m3_bf16 b) { return __uint_as_float(static_cast<unsigned>(b) << 16); }

// Round to nearest even, NaN kept quiet, as torch's float -> bfloat16 cast does.
M3_DEV m3_bf16 f2bf(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<m3_bf16>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<m3_bf16>(u >> 16);
}

M3_DEV float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

// The butterfly order is fixed, so the sum is bitwise repeatable.
M3_DEV float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

M3_DEV float warp_inclusive_scan(float x) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  return x;
}

// Reduce across the block in a fixed tree order; `red` holds blockDim.x floats. Every thread gets
// the total. Ends with a barrier, so `red` may be reused right after.
template <int NT>
M3_DEV float block_sum(float x, float* red) {
  red[threadIdx.x] = x;
  __syncthreads();
#pragma unroll
  for (int s = NT / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const float total = red[0];
  __syncthreads();
  return total;
}

// C[M][NC] accumulated in registers: each thread owns TM rows x TN columns, strided so that
// consecutive threads read consecutive columns (conflict-free on padded rows) and the rows of
// a warp are broadcasts.
template <int M, int NC, int TM, int TN, int NT>
struct RegTile {
  static constexpr int TY = M / TM;
  static constexpr int TX = NC / TN;
  static_assert(TY * TX == NT, "the tile must cover the block exactly");
  float acc[TM][TN];
  int ty, tx;

  M3_DEV RegTile() : ty(threadIdx.x / TX), tx(threadIdx.x % TX) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
  }
  M3_DEV int row(int i) const { return ty + i * TY; }
  M3_DEV int col(int j) const { return tx + j * TX; }

  // acc[r][c] += sum_k fa(r, k) * fb(k, c)
  template <int K, class FA, class FB>
  M3_DEV void mac(FA fa, FB fb) {
#pragma unroll 4
    for (int k = 0; k < K; ++k) {
      float a[TM], b[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) a[i] = fa(row(i), k);
#pragma unroll
      for (int j = 0; j < TN; ++j) b[j] = fb(k, col(j));
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
  }

  template <class F>
  M3_DEV void for_each(F f) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) f(row(i), col(j), acc[i][j]);
  }
};
