// Run 91 (prepared): the chunk-64 forward's state chain on wgmma with the state held in registers,
// as the design note lays it out, stripped of the model's scalar math. A job (chain c, step j):
//   U = A_j B_j^T        (64 x 128 x 64, both operands in swizzled shared tiles; before the wait)
//   wait for step j - 1's flag; Z_j from the workspace straight into U's accumulator layout;
//   Z_j+1 = alpha Z_j + U, stored in that layout; publish;
//   y_j = Z_j X_j^T      (64 x 64 x 128, Z_j as wgmma's register operand, X_j in shared).
// The register operand takes columns t, t + 4 of each block of eight where the accumulator holds
// 2t, 2t + 1: B_j's rows are staged permuted (position 8b + 2t holds row 8b + t, 8b + 2t + 1 holds
// 8b + t + 4), so accumulator position 2t (2t + 1) is state column 8b + t (8b + t + 4), exactly
// where y's operand wants it, and X_j stays as it is. First a small chained run is checked against
// double precision on the host (tf32-truncated operands), then c01's shape is timed, with and
// without the waits. Build:
//   nvcc -O3 -gencode arch=compute_90a,code=sm_90a -I kernel_src -o /tmp/state_chain_bench methods/results/run91/state_chain_bench.cu
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "m3_wgmma.cuh"

#define CK(x)                                                         \
  do {                                                                \
    cudaError_t e_ = (x);                                             \
    if (e_ != cudaSuccess) {                                          \
      std::printf("%s failed: %s\n", #x, cudaGetErrorString(e_));    \
      std::exit(1);                                                   \
    }                                                                 \
  } while (0)

constexpr int P = 64, N = 128, C = 64;
constexpr int kSmem = (P * C + N * C + C * N) * 4 + 1024;  // A, B, X tiles and alignment

__device__ __forceinline__ unsigned sh(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

// The state's row position of column n (B_j's rows): 8b + t -> 8b + 2t, 8b + t + 4 -> 8b + 2t + 1.
__host__ __device__ inline int permuted(int n) {
  const int q = n & 7;
  return (n & ~7) | (q < 4 ? 2 * q : 2 * (q - 4) + 1);
}

// a: [steps][P][C], b: [steps][N][C], x: [steps][C][N] (shared by the chains, as q and k are by
// the heads); ws: [chains][steps + 1][P * N] in accumulator order; y: [chains][steps][P][C].
extern "C" __global__ void __launch_bounds__(128, 2) state_chain(const float* a, const float* b, const float* x, float* ws,
                                                                int* flags, int* ticket, float* y, int chains, int steps,
                                                                float alpha, int wait) {
  extern __shared__ float4 sm4[];
  __shared__ int job;
  const unsigned raw = sh(sm4);
  float* ta = reinterpret_cast<float*>(sm4) + ((1024 - (raw & 1023)) & 1023) / 4;
  float* tb = ta + P * C;
  float* tx = tb + N * C;
  if (threadIdx.x == 0) job = atomicAdd(ticket, 1);
  __syncthreads();
  const int c = job % chains, j = job / chains;
  m3wg::stage_sw128<P, C, 128>(a + j * P * C, ta);
  m3wg::stage_sw128<N, C, 128>(b + j * N * C, tb, [](int r) { return permuted(r); });
  m3wg::stage_sw128<C, N, 128>(x + j * C * N, tx);
  m3wg::fence_shared_for_async_proxy();
  __syncthreads();

  float u[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) u[i] = 0.f;
  m3wg::wgmma_fence();
#pragma unroll
  for (int s = 0; s < C / 8; ++s) m3wg::wgmma_m64n128k8_tf32(u, m3wg::sw128_kstep(sh(ta), P, s), m3wg::sw128_kstep(sh(tb), N, s));
  m3wg::wgmma_commit();

  // Each thread's 64 words of a state: 16 float4, one per block of eight columns, a warp's 32
  // lanes contiguous (512 bytes a warp instruction).
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float4* zin = reinterpret_cast<const float4*>(ws + (static_cast<long long>(c) * (steps + 1) + j) * P * N);
  float4* zout = reinterpret_cast<float4*>(ws + (static_cast<long long>(c) * (steps + 1) + j + 1) * P * N);
  if (j > 0 && wait) {
    if (threadIdx.x == 0) {
      int ready = 0;
      for (;;) {
        asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(ready) : "l"(flags + c * steps + j - 1) : "memory");
        if (ready) break;
        __nanosleep(64);
      }
    }
    __syncthreads();
  }
  float z[64];
#pragma unroll
  for (int jb = 0; jb < 16; ++jb) {
    const float4 w4 = j > 0 ? __ldcg(zin + (warp * 16 + jb) * 32 + lane) : make_float4(0.f, 0.f, 0.f, 0.f);
    z[4 * jb] = w4.x;
    z[4 * jb + 1] = w4.y;
    z[4 * jb + 2] = w4.z;
    z[4 * jb + 3] = w4.w;
  }
  m3wg::wgmma_wait<0>();
#pragma unroll
  for (int jb = 0; jb < 16; ++jb) {
    zout[(warp * 16 + jb) * 32 + lane] =
        make_float4(alpha * z[4 * jb] + u[4 * jb], alpha * z[4 * jb + 1] + u[4 * jb + 1],
                    alpha * z[4 * jb + 2] + u[4 * jb + 2], alpha * z[4 * jb + 3] + u[4 * jb + 3]);
  }
  __syncthreads();
  if (threadIdx.x == 0) asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(flags + c * steps + j), "r"(1) : "memory");

  // y = Z_j X^T: k-step s covers state columns 8s .. 8s + 7; the operand's (t, t + 4) are the
  // accumulator's (2t, 2t + 1), rows g and g + 8 as in the accumulator.
  float acc[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) acc[i] = 0.f;
  m3wg::wgmma_fence();
#pragma unroll
  for (int s = 0; s < N / 8; ++s) {
    m3wg::wgmma_m64n64k8_tf32_rs(acc, z[4 * s], z[4 * s + 2], z[4 * s + 1], z[4 * s + 3], m3wg::sw128_kstep(sh(tx), C, s));
  }
  m3wg::wgmma_commit();
  m3wg::wgmma_wait<0>();
  m3wg::store_accumulator<64>(acc, y + (static_cast<long long>(c) * steps + j) * P * C, C);
}

// ---- host ----------------------------------------------------------------------------------------
static double tf32(float v) {
  unsigned u;
  std::memcpy(&u, &v, 4);
  u &= 0xFFFFE000u;
  std::memcpy(&v, &u, 4);
  return v;
}

struct Buffers {
  float *a, *b, *x, *ws, *y;
  int *flags, *ticket;
};

static float run(const Buffers& d, int chains, int steps, float alpha, int wait) {
  CK(cudaMemset(d.flags, 0, size_t(chains) * steps * 4));
  CK(cudaMemset(d.ticket, 0, 4));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventRecord(e0));
  state_chain<<<chains * steps, 128, kSmem>>>(d.a, d.b, d.x, d.ws, d.flags, d.ticket, d.y, chains, steps, alpha, wait);
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  return ms;
}

int main() {
  const int max_chains = 160, max_steps = 30;
  const float alpha = 0.75f;
  CK(cudaFuncSetAttribute(state_chain, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  std::vector<float> ha(size_t(max_steps) * P * C), hb(size_t(max_steps) * N * C), hx(size_t(max_steps) * C * N);
  unsigned seed = 91;
  for (auto* v : {&ha, &hb, &hx})
    for (float& e : *v) {
      seed = seed * 1664525u + 1013904223u;
      e = (static_cast<float>((seed >> 8) & 0xFFFF) / 32768.f - 1.f) * 0.125f;
    }
  Buffers d;
  CK(cudaMalloc(&d.a, ha.size() * 4));
  CK(cudaMalloc(&d.b, hb.size() * 4));
  CK(cudaMalloc(&d.x, hx.size() * 4));
  CK(cudaMalloc(&d.ws, size_t(max_chains) * (max_steps + 1) * P * N * 4));
  CK(cudaMalloc(&d.y, size_t(max_chains) * max_steps * P * C * 4));
  CK(cudaMalloc(&d.flags, size_t(max_chains) * max_steps * 4));
  CK(cudaMalloc(&d.ticket, 4));
  CK(cudaMemcpy(d.a, ha.data(), ha.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d.b, hb.data(), hb.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d.x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));

  // Check: 3 chains of 6 steps against double precision (Z as the tensor core reads it: tf32).
  const int cc = 3, cs = 6;
  run(d, cc, cs, alpha, 1);
  std::vector<float> hy(size_t(cc) * cs * P * C), hz(size_t(cc) * (cs + 1) * P * N);
  CK(cudaMemcpy(hy.data(), d.y, hy.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hz.data(), d.ws, hz.size() * 4, cudaMemcpyDeviceToHost));
  double ynum = 0, yden = 0, znum = 0, zden = 0;
  for (int c = 0; c < cc; ++c) {
    std::vector<double> z(P * N, 0.0);
    for (int j = 0; j < cs; ++j) {
      // The GPU's Z_j as stored (accumulator order), for y's operand: rows g, g + 8 of warp w, block
      // jb, lane t's positions 2t, 2t + 1 are state columns 8 jb + t, 8 jb + t + 4.
      std::vector<double> zg(P * N, 0.0);
      if (j > 0) {
        const float* w = hz.data() + (size_t(c) * (cs + 1) + j) * P * N;
        for (int wp = 0; wp < 4; ++wp)
          for (int jb = 0; jb < 16; ++jb)
            for (int ln = 0; ln < 32; ++ln)
              for (int e = 0; e < 4; ++e) {
                const int r = 16 * wp + ln / 4 + (e >= 2 ? 8 : 0), col = 8 * jb + ln % 4 + (e % 2 ? 4 : 0);
                zg[r * N + col] = w[((wp * 16 + jb) * 32 + ln) * 4 + e];
              }
        for (int i = 0; i < P * N; ++i) {
          znum += (zg[i] - z[i]) * (zg[i] - z[i]);
          zden += z[i] * z[i];
        }
      }
      for (int p = 0; p < P; ++p)
        for (int t = 0; t < C; ++t) {
          double ref = 0;
          for (int n = 0; n < N; ++n) ref += tf32(static_cast<float>(zg[p * N + n])) * tf32(hx[(size_t(j) * C + t) * N + n]);
          const double got = hy[((size_t(c) * cs + j) * P + p) * C + t];
          ynum += (got - ref) * (got - ref);
          yden += ref * ref;
        }
      for (int p = 0; p < P; ++p)
        for (int n = 0; n < N; ++n) {
          double u = 0;
          for (int s = 0; s < C; ++s) u += tf32(ha[(size_t(j) * P + p) * C + s]) * tf32(hb[(size_t(j) * N + n) * C + s]);
          z[p * N + n] = alpha * z[p * N + n] + u;
        }
    }
  }
  const double zerr = std::sqrt(znum / zden), yerr = std::sqrt(ynum / yden);
  const bool ok = zerr < 1e-5 && yerr < 1e-5;
  std::printf("check (3 chains x 6 steps): states rel-L2 %.2e, y rel-L2 %.2e: %s\n", zerr, yerr, ok ? "ok" : "WRONG");

  int per_sm = 0, sms = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, state_chain, 128, kSmem));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int shapes[][2] = {{160, 15}, {160, 30}, {96, 15}};
  for (const auto& sh : shapes) {
    float best[2] = {1e30f, 1e30f};
    for (int trial = 0; trial < 5; ++trial)
      for (int wait = 0; wait < 2; ++wait) best[wait] = std::fmin(best[wait], run(d, sh[0], sh[1], alpha, wait));
    const int jobs = sh[0] * sh[1];
    std::printf("%3d chains x %2d steps (%4d jobs, %d CTAs/SM): chained %.1f us (%.2f us a step), no waits %.1f us "
                "(%.2f us of an SM a job)\n",
                sh[0], sh[1], jobs, per_sm, best[1] * 1e3, best[1] * 1e3 / sh[1], best[0] * 1e3,
                best[0] * 1e3 * sms / jobs);
  }
  return ok ? 0 : 1;
}
