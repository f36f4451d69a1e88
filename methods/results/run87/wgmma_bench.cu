// Run 87: one 64 x 64 x 128 tf32 tile product, repeated, by the two paths a chunk kernel can take:
// (a) mma.sync m16n8k8 with scalar shared-memory operand loads from row-padded tiles (the path of
//     today's kernels: MmaTile, M3_SCALAR_ROWS_A/B), four warps of 16 rows x 64 columns;
// (b) wgmma m64n64k8 from 128-byte-swizzled tiles (kernel_src/m3_wgmma.cuh), one warpgroup.
// Both check against a double-precision product of the tf32-truncated inputs, then time `reps`
// products per CTA on 3 CTAs per SM. ncu then counts each one's L1 data-pipe wavefronts.
// Build: nvcc -O3 -gencode arch=compute_90a,code=sm_90a -I kernel_src -o /tmp/wgmma_bench methods/results/run87/wgmma_bench.cu
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "m3_wgmma_probe.cuh"

constexpr int K = 128, LD = K + 4;

__device__ __forceinline__ void mma_tf32(float (&c)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

extern "C" __global__ void __launch_bounds__(128) mma_sync_probe(const float* a, const float* b, float* d, int reps) {
  extern __shared__ float sm[];
  float* ta = sm;
  float* tb = sm + 64 * LD;
  for (int i = threadIdx.x; i < 64 * K / 4; i += 128) {
    const int r = i / (K / 4), k = 4 * (i % (K / 4));
    *reinterpret_cast<float4*>(ta + r * LD + k) = __ldg(reinterpret_cast<const float4*>(a + r * K + k));
    *reinterpret_cast<float4*>(tb + r * LD + k) = __ldg(reinterpret_cast<const float4*>(b + r * K + k));
  }
  __syncthreads();
  const int w = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
  float acc[8][4] = {};
  for (int rep = 0; rep < reps; ++rep) {
#pragma unroll
    for (int s = 0; s < K / 8; ++s) {
      const int k = 8 * s;
      const float* ar = ta + (16 * w + g) * LD + k + t;
      unsigned af[4] = {__float_as_uint(ar[0]), __float_as_uint(ar[8 * LD]), __float_as_uint(ar[4]),
                        __float_as_uint(ar[8 * LD + 4])};
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float* br = tb + (8 * j + g) * LD + k + t;
        unsigned bf[2] = {__float_as_uint(br[0]), __float_as_uint(br[4])};
        mma_tf32(acc[j], af, bf);
      }
    }
  }
  float* out = d + static_cast<long long>(blockIdx.x) * 64 * 64;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int r = 16 * w + g, c = 8 * j + 2 * t;
    *reinterpret_cast<float2*>(out + r * 64 + c) = make_float2(acc[j][0], acc[j][1]);
    *reinterpret_cast<float2*>(out + (r + 8) * 64 + c) = make_float2(acc[j][2], acc[j][3]);
  }
}

static float tf32_truncate(float x) {
  unsigned u;
  std::memcpy(&u, &x, 4);
  u &= 0xFFFFE000u;
  std::memcpy(&x, &u, 4);
  return x;
}

#define CK(x)                                                                           \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      std::printf("%s failed: %s\n", #x, cudaGetErrorString(e_));                      \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 4000;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::vector<float> ha(64 * K), hb(64 * K);
  unsigned s = 12345;
  for (auto* v : {&ha, &hb})
    for (float& x : *v) {
      s = s * 1664525u + 1013904223u;
      x = static_cast<float>((s >> 8) & 0xFFFF) / 32768.f - 1.f;
    }
  std::vector<double> ref(64 * 64);
  for (int r = 0; r < 64; ++r)
    for (int c = 0; c < 64; ++c) {
      double acc = 0;
      for (int k = 0; k < K; ++k) acc += double(tf32_truncate(ha[r * K + k])) * double(tf32_truncate(hb[c * K + k]));
      ref[r * 64 + c] = acc;
    }
  const int ctas = 3 * sms;
  float *da, *db, *dd;
  CK(cudaMalloc(&da, ha.size() * 4));
  CK(cudaMalloc(&db, hb.size() * 4));
  CK(cudaMalloc(&dd, size_t(ctas) * 64 * 64 * 4));
  CK(cudaMemcpy(da, ha.data(), ha.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(db, hb.data(), hb.size() * 4, cudaMemcpyHostToDevice));
  const int smem_wg = 2 * 64 * K * 4 + 1024, smem_ms = 2 * 64 * LD * 4;
  CK(cudaFuncSetAttribute(m3_wgmma_probe_tf32, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_wg));
  CK(cudaFuncSetAttribute(mma_sync_probe, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_ms));
  struct Path {
    const char* name;
    void (*fn)(const float*, const float*, float*, int);
    int smem;
  } paths[] = {{"mma.sync (scalar LDS operands)", mma_sync_probe, smem_ms},
               {"wgmma (swizzled shared operands)", m3_wgmma_probe_tf32, smem_wg}};
  int failures = 0;
  for (const Path& p : paths) {
    p.fn<<<1, 128, p.smem>>>(da, db, dd, 1);
    CK(cudaDeviceSynchronize());
    std::vector<float> hd(64 * 64);
    CK(cudaMemcpy(hd.data(), dd, hd.size() * 4, cudaMemcpyDeviceToHost));
    double num = 0, den = 0, worst = 0;
    for (int i = 0; i < 64 * 64; ++i) {
      num += (hd[i] - ref[i]) * (hd[i] - ref[i]);
      den += ref[i] * ref[i];
      worst = std::fmax(worst, std::fabs(hd[i] - ref[i]));
    }
    const double rel = std::sqrt(num / den);
    const bool ok = rel < 1e-6;
    failures += !ok;
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, p.fn, 128, p.smem));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float best = 1e30f;
    for (int trial = 0; trial < 5; ++trial) {
      CK(cudaEventRecord(e0));
      p.fn<<<ctas, 128, p.smem>>>(da, db, dd, reps);
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      best = std::fmin(best, ms);
    }
    const double flop = 2.0 * 64 * 64 * K * double(reps) * ctas;
    std::printf("%-34s rel-L2 %.2e max|err| %.2e %s | %d CTAs/SM, %d CTAs x %d products: %.3f ms, %.1f TFLOP/s\n",
                p.name, rel, worst, ok ? "ok" : "WRONG", per_sm, ctas, reps, best, flop / best / 1e9);
  }
  return failures ? 1 : 0;
}
