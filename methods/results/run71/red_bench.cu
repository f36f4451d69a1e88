// Micro-benchmark: per-head fp32 partials (store, then a head-sum kernel) against 64-bit
// fixed-point reductions into one accumulator per (token, column), on c01's shape.
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cmath>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
constexpr int C = 32, H = 32, W = 256;  // W: dq and dk columns (2 N)
constexpr int CHUNKS = 145, T = CHUNKS * C;
__device__ float value(int t, int h, int c) { return __sinf(0.001f * (t * 7 + h * 13 + c)) * (1.f + h); }

__global__ void store_partials(float* part) {  // part[(t * H + h) * W + c]
  const int job = blockIdx.x, chunk = job / H, h = job % H;
  for (int i = threadIdx.x; i < C * W / 4; i += blockDim.x) {
    const int t = chunk * C + (4 * i) / W, c = (4 * i) % W;
    float4 v = make_float4(value(t, h, c), value(t, h, c + 1), value(t, h, c + 2), value(t, h, c + 3));
    *reinterpret_cast<float4*>(part + (static_cast<long long>(t) * H + h) * W + c) = v;
  }
}
__global__ void sum_heads(const float* part, __nv_bfloat16* out) {
  const long long e = (blockIdx.x * (long long)blockDim.x + threadIdx.x) * 4;
  if (e >= (long long)T * W) return;
  const int t = e / W, c = e % W;
  float4 acc = make_float4(0, 0, 0, 0);
  for (int h = 0; h < H; ++h) {
    float4 v = *reinterpret_cast<const float4*>(part + (static_cast<long long>(t) * H + h) * W + c);
    acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
  }
  out[e] = __float2bfloat16(acc.x); out[e + 1] = __float2bfloat16(acc.y);
  out[e + 2] = __float2bfloat16(acc.z); out[e + 3] = __float2bfloat16(acc.w);
}
__global__ void red_fixed(unsigned long long* acc) {
  const int job = blockIdx.x, chunk = job / H, h = job % H;
  for (int i = threadIdx.x; i < C * W; i += blockDim.x) {
    const int t = chunk * C + i / W, c = i % W;
    const long long q = __float2ll_rn(value(t, h, c) * 4294967296.f);
    atomicAdd(acc + static_cast<long long>(t) * W + c, static_cast<unsigned long long>(q));
  }
}
__global__ void convert(const unsigned long long* acc, __nv_bfloat16* out) {
  const long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (e >= (long long)T * W) return;
  out[e] = __float2bfloat16(static_cast<float>(static_cast<long long>(acc[e]) * (1.0 / 4294967296.0)));
}
__global__ void flush(float* big, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) big[i] += 1.f;
}
template <class F> float timed(F f, float* big, long long nbig) {
  std::vector<float> ms;
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  for (int r = 0; r < 21; ++r) {
    flush<<<1024, 256>>>(big, nbig);
    cudaEventRecord(a); f(); cudaEventRecord(b); cudaEventSynchronize(b);
    float x; cudaEventElapsedTime(&x, a, b); ms.push_back(x * 1000.f);
  }
  std::sort(ms.begin(), ms.end()); return ms[ms.size() / 2];
}
int main() {
  float* part; __nv_bfloat16 *o1, *o2; unsigned long long* acc; float* big;
  const long long nbig = 64ll << 20;  // 256 MB to flush L2
  cudaMalloc(&part, (size_t)T * H * W * 4); cudaMalloc(&o1, (size_t)T * W * 2); cudaMalloc(&o2, (size_t)T * W * 2);
  cudaMalloc(&acc, (size_t)T * W * 8); cudaMalloc(&big, nbig * 4);
  const int jobs = CHUNKS * H, cvt = (T * W + 255) / 256, sum = (T * W / 4 + 255) / 256;
  float t_store = timed([&] { store_partials<<<jobs, 256>>>(part); }, big, nbig);
  float t_sum = timed([&] { sum_heads<<<sum, 256>>>(part, o1); }, big, nbig);
  float t_red = timed([&] { cudaMemsetAsync(acc, 0, (size_t)T * W * 8); red_fixed<<<jobs, 256>>>(acc); }, big, nbig);
  float t_cvt = timed([&] { convert<<<cvt, 256>>>(acc, o2); }, big, nbig);
  // Compare the two results (each relative to the larger magnitude).
  std::vector<__nv_bfloat16> h1((size_t)T * W), h2((size_t)T * W);
  cudaMemcpy(h1.data(), o1, h1.size() * 2, cudaMemcpyDeviceToHost); cudaMemcpy(h2.data(), o2, h2.size() * 2, cudaMemcpyDeviceToHost);
  double num = 0, den = 0; size_t same = 0;
  for (size_t i = 0; i < h1.size(); ++i) { double a = __bfloat162float(h1[i]), b = __bfloat162float(h2[i]); num += (a - b) * (a - b); den += a * a; same += a == b; }
  printf("T=%d H=%d jobs=%d: store partials %.1f us, sum heads %.1f us | memset+red.u64 %.1f us, convert %.1f us | rel-L2 %.2e, equal %.4f, err %s\n",
         T, H, jobs, t_store, t_sum, t_red, t_cvt, std::sqrt(num / den), (double)same / h1.size(), cudaGetErrorString(cudaGetLastError()));
}
