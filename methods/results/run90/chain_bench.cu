// Run 90: the latency of one step of the chunk-to-chunk state chain, alone. Each CTA is one job of
// one chain (tickets in launch order, as the operator's kernels draw them): it waits for its
// predecessor's flag, reads the 32 KB state the predecessor wrote (16-byte loads from L2, 256
// threads), writes the next state (alpha * state + 1), and publishes its own flag; nothing else.
// With `chains` chains of `steps` jobs and every chain in flight at once, the kernel's time over
// `steps` is the latency of one step: the floor a chained forward of `steps` chunks cannot beat.
// Build: nvcc -O3 -gencode arch=compute_90a,code=sm_90a -o /tmp/chain_bench methods/results/run90/chain_bench.cu
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                         \
  do {                                                                \
    cudaError_t e_ = (x);                                             \
    if (e_ != cudaSuccess) {                                          \
      std::printf("%s failed: %s\n", #x, cudaGetErrorString(e_));    \
      std::exit(1);                                                   \
    }                                                                 \
  } while (0)

constexpr int kStateFloats = 64 * 128;
constexpr int kQuads = kStateFloats / 4 / 256;  // float4 per thread

// wait: 1 = spin on the predecessor's flag (the operator's protocol), 0 = no wait (timing only).
extern "C" __global__ void __launch_bounds__(256, 2) chain_step(float* states, int* flags, int* ticket, int chains,
                                                               int steps, int wait) {
  __shared__ int job;
  if (threadIdx.x == 0) job = atomicAdd(ticket, 1);
  __syncthreads();
  const int c = job % chains, j = job / chains;
  float4* next = reinterpret_cast<float4*>(states + (static_cast<long long>(c) * (steps + 1) + j + 1) * kStateFloats);
  const float4* prev = reinterpret_cast<const float4*>(states + (static_cast<long long>(c) * (steps + 1) + j) * kStateFloats);
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
  float4 u[kQuads];
#pragma unroll
  for (int i = 0; i < kQuads; ++i) u[i] = __ldcg(prev + threadIdx.x + 256 * i);
#pragma unroll
  for (int i = 0; i < kQuads; ++i) {
    const float4 x = u[i];
    next[threadIdx.x + 256 * i] = make_float4(0.5f * x.x + 1.f, 0.5f * x.y + 1.f, 0.5f * x.z + 1.f, 0.5f * x.w + 1.f);
  }
  __syncthreads();
  if (threadIdx.x == 0) asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(flags + c * steps + j), "r"(1) : "memory");
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int configs[][2] = {{160, 15}, {160, 30}, {96, 15}, {96, 30}, {160, 60}};
  float* states;
  int *flags, *ticket;
  const int max_chains = 160, max_steps = 60;
  CK(cudaMalloc(&states, size_t(max_chains) * (max_steps + 1) * kStateFloats * 4));
  CK(cudaMalloc(&flags, size_t(max_chains) * max_steps * 4));
  CK(cudaMalloc(&ticket, 4));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  int failures = 0;
  for (const auto& cfg : configs) {
    const int chains = cfg[0], steps = cfg[1];
    float ms[2] = {0, 0};
    for (int wait = 1; wait >= 0; --wait) {
      float best = 1e30f;
      for (int trial = 0; trial < 5; ++trial) {
        CK(cudaMemset(states, 0, size_t(chains) * (steps + 1) * kStateFloats * 4));
        CK(cudaMemset(flags, 0, size_t(chains) * steps * 4));
        CK(cudaMemset(ticket, 0, 4));
        CK(cudaEventRecord(e0));
        chain_step<<<chains * steps, 256>>>(states, flags, ticket, chains, steps, wait);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float t = 0;
        CK(cudaEventElapsedTime(&t, e0, e1));
        best = best < t ? best : t;
      }
      ms[wait] = best;
      if (wait) {  // the chained result: state j = 2 - 2^(1-j) (exact in fp32 for these j)
        std::vector<float> h(kStateFloats);
        const int c = chains - 1;
        CK(cudaMemcpy(h.data(), states + (size_t(c) * (steps + 1) + steps) * kStateFloats, h.size() * 4,
                      cudaMemcpyDeviceToHost));
        float expect = 0.f;
        for (int j = 0; j < steps; ++j) expect = 0.5f * expect + 1.f;
        for (float x : h) failures += x != expect;
      }
    }
    std::printf("chains %3d x %2d steps (%4d jobs, %d SMs): chained %.1f us = %.2f us a step; no waits %.1f us%s\n",
                chains, steps, chains * steps, sms, ms[1] * 1e3, ms[1] * 1e3 / steps, ms[0] * 1e3,
                failures ? "  WRONG STATES" : "");
  }
  return failures ? 1 : 0;
}
