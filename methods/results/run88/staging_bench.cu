// Run 88: what the rewrite's tile movement and products cost on the SM's L1 data pipe.
// (1) A 32 KB fp32 tile (a chunk state) copied L2 -> shared -> L2 by 256 threads with 16-byte
//     loads and stores (today's staging), or by one thread with cp.async.bulk (the TMA engine's
//     bulk copy, completion on an mbarrier) in and out.
// (2) Tile products on wgmma beside run 87's m64n64 (both operands in shared memory): m64n128
//     (twice the columns per A read) and m64n64 with A from registers (only B read from shared).
// Each case checks its result, then is timed on 2 CTAs per SM; ncu counts the wavefronts.
// Build: nvcc -O3 -gencode arch=compute_90a,code=sm_90a -I kernel_src -o /tmp/staging_bench methods/results/run88/staging_bench.cu
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

constexpr int kTileFloats = 64 * 128;  // one chunk state, P x N
constexpr int kTileBytes = kTileFloats * 4;

// ---- (1) staging -------------------------------------------------------------------------------
extern "C" __global__ void __launch_bounds__(256) stage_lsu(const float* src, float* dst, int tiles, int reps) {
  extern __shared__ float4 sm4[];
  for (int i = 0; i < reps; ++i) {
    const long long tile = (static_cast<long long>(blockIdx.x) * reps + i) % tiles;
    const float4* s = reinterpret_cast<const float4*>(src + tile * kTileFloats);
    float4* d = reinterpret_cast<float4*>(dst + tile * kTileFloats);
#pragma unroll
    for (int j = 0; j < kTileFloats / 4 / 256; ++j) sm4[threadIdx.x + 256 * j] = __ldcg(s + threadIdx.x + 256 * j);
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kTileFloats / 4 / 256; ++j) __stcg(d + threadIdx.x + 256 * j, sm4[(threadIdx.x + 256 * j) ^ 1]);
    __syncthreads();
  }
}

__device__ __forceinline__ unsigned sh(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

extern "C" __global__ void __launch_bounds__(256) stage_bulk(const float* src, float* dst, int tiles, int reps) {
  extern __shared__ float4 sm4[];
  __shared__ alignas(8) unsigned long long bar;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(sh(&bar)));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x != 0) return;  // one thread drives the copies; the others would do the tile's work
  for (int i = 0; i < reps; ++i) {
    const long long tile = (static_cast<long long>(blockIdx.x) * reps + i) % tiles;
    // The previous tile's store must have read the buffer before it is refilled.
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sh(&bar)), "r"(kTileBytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(sh(sm4)),
                 "l"(src + tile * kTileFloats), "r"(kTileBytes), "r"(sh(&bar))
                 : "memory");
    asm volatile(
        "{\n.reg .pred done;\nwait_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra wait_%=;\n}\n" ::"r"(sh(&bar)),
        "r"(i & 1)
        : "memory");
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst + tile * kTileFloats), "r"(sh(sm4)),
                 "r"(kTileBytes)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// ---- (2) products --------------------------------------------------------------------------------
constexpr int K = 128;

__device__ __forceinline__ void wgmma_m64n128k8_tf32(float (&d)[64], unsigned long long a, unsigned long long b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, 1, 1, 1;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(a), "l"(b));
}

// A from registers: thread (warp w, g, t) holds A(16 w + g, t), A(16 w + g + 8, t), A(16 w + g, t + 4),
// A(16 w + g + 8, t + 4) of each k-step, as mma.sync's m16n8k8 tf32 A fragment.
__device__ __forceinline__ void wgmma_m64n64k8_tf32_rs(float (&d)[32], const unsigned (&a)[4], unsigned long long b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, 1, 1, 1;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}

// d (64 x 128) = reps * a (64 x K) b (128 x K)^T, both operands swizzled in shared memory.
extern "C" __global__ void __launch_bounds__(128) product_n128(const float* a, const float* b, float* d, int reps) {
  extern __shared__ float4 sm4[];
  const unsigned raw = sh(sm4);
  float* ta = reinterpret_cast<float*>(sm4) + ((1024 - (raw & 1023)) & 1023) / 4;
  float* tb = ta + 64 * K;
  m3wg::stage_sw128<64, K, 128>(a, ta);
  m3wg::stage_sw128<128, K, 128>(b, tb);
  m3wg::fence_shared_for_async_proxy();
  __syncthreads();
  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.f;
  for (int rep = 0; rep < reps; ++rep) {
    m3wg::wgmma_fence();
#pragma unroll
    for (int s = 0; s < K / 8; ++s) wgmma_m64n128k8_tf32(acc, m3wg::sw128_kstep(sh(ta), 64, s), m3wg::sw128_kstep(sh(tb), 128, s));
    m3wg::wgmma_commit();
    m3wg::wgmma_wait<0>();
  }
  const int w = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
  float* out = d + static_cast<long long>(blockIdx.x) * 64 * 128;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int r = 16 * w + g, c = 8 * j + 2 * t;
    *reinterpret_cast<float2*>(out + r * 128 + c) = make_float2(acc[4 * j], acc[4 * j + 1]);
    *reinterpret_cast<float2*>(out + (r + 8) * 128 + c) = make_float2(acc[4 * j + 2], acc[4 * j + 3]);
  }
}

// d (64 x 64) = reps * a b^T with a's fragments held in registers for the whole product.
extern "C" __global__ void __launch_bounds__(128) product_rs(const float* a, const float* b, float* d, int reps) {
  extern __shared__ float4 sm4[];
  const unsigned raw = sh(sm4);
  float* tb = reinterpret_cast<float*>(sm4) + ((1024 - (raw & 1023)) & 1023) / 4;
  m3wg::stage_sw128<64, K, 128>(b, tb);
  const int w = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
  unsigned af[K / 8][4];
#pragma unroll
  for (int s = 0; s < K / 8; ++s) {
    const float* ar = a + (16 * w + g) * K + 8 * s + t;
    af[s][0] = __float_as_uint(ar[0]);
    af[s][1] = __float_as_uint(ar[8 * K]);
    af[s][2] = __float_as_uint(ar[4]);
    af[s][3] = __float_as_uint(ar[8 * K + 4]);
  }
  m3wg::fence_shared_for_async_proxy();
  __syncthreads();
  float acc[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) acc[i] = 0.f;
  for (int rep = 0; rep < reps; ++rep) {
    m3wg::wgmma_fence();
#pragma unroll
    for (int s = 0; s < K / 8; ++s) wgmma_m64n64k8_tf32_rs(acc, af[s], m3wg::sw128_kstep(sh(tb), 64, s));
    m3wg::wgmma_commit();
    m3wg::wgmma_wait<0>();
  }
  float* out = d + static_cast<long long>(blockIdx.x) * 64 * 64;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int r = 16 * w + g, c = 8 * j + 2 * t;
    *reinterpret_cast<float2*>(out + r * 64 + c) = make_float2(acc[4 * j], acc[4 * j + 1]);
    *reinterpret_cast<float2*>(out + (r + 8) * 64 + c) = make_float2(acc[4 * j + 2], acc[4 * j + 3]);
  }
}

// ---- host ----------------------------------------------------------------------------------------
static double tf32(float x) {
  unsigned u;
  std::memcpy(&u, &x, 4);
  u &= 0xFFFFE000u;
  std::memcpy(&x, &u, 4);
  return x;
}

static void fill(std::vector<float>& v, unsigned seed) {
  for (float& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = static_cast<float>((seed >> 8) & 0xFFFF) / 32768.f - 1.f;
  }
}

template <class Launch>
static float best_ms(Launch launch) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  float best = 1e30f;
  for (int trial = 0; trial < 5; ++trial) {
    CK(cudaEventRecord(e0));
    launch();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    best = std::fmin(best, ms);
  }
  return best;
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 2000;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  int failures = 0;

  // (1) staging: 2 CTAs per SM, each moving `reps` tiles through shared memory; the tiles stay in L2.
  {
    const int ctas = 2 * sms, tiles = 256;  // 8 MB of tiles
    std::vector<float> h(size_t(tiles) * kTileFloats);
    fill(h, 7);
    float *src, *dst;
    CK(cudaMalloc(&src, h.size() * 4));
    CK(cudaMalloc(&dst, h.size() * 4));
    CK(cudaMemcpy(src, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaFuncSetAttribute(stage_lsu, cudaFuncAttributeMaxDynamicSharedMemorySize, kTileBytes));
    CK(cudaFuncSetAttribute(stage_bulk, cudaFuncAttributeMaxDynamicSharedMemorySize, kTileBytes));
    struct {
      const char* name;
      void (*fn)(const float*, float*, int, int);
      bool swapped;  // stage_lsu writes float4 pairs swapped, to keep the store from being a plain copy
    } paths[] = {{"staging by 16-byte ld/st (256 threads)", stage_lsu, true}, {"staging by cp.async.bulk (1 thread)", stage_bulk, false}};
    for (auto& p : paths) {
      CK(cudaMemset(dst, 0, h.size() * 4));
      p.fn<<<tiles, 256, kTileBytes>>>(src, dst, tiles, 1);
      CK(cudaDeviceSynchronize());
      std::vector<float> out(h.size());
      CK(cudaMemcpy(out.data(), dst, out.size() * 4, cudaMemcpyDeviceToHost));
      bool ok = true;
      for (size_t i = 0; i < out.size() && ok; ++i) {
        const size_t j = p.swapped ? (((i / 4) ^ 1) * 4 + i % 4) : i;
        ok = out[i] == h[j];
      }
      failures += !ok;
      const float ms = best_ms([&] { p.fn<<<ctas, 256, kTileBytes>>>(src, dst, tiles, reps); });
      const double bytes = 2.0 * kTileBytes * double(reps) * ctas;
      std::printf("%-42s %s | %d CTAs x %d tiles: %.3f ms, %.2f us per tile per CTA, %.1f TB/s through L2\n", p.name,
                  ok ? "ok" : "WRONG", ctas, reps, ms, ms * 1e3 / reps, bytes / ms / 1e9);
    }
    CK(cudaFree(src));
    CK(cudaFree(dst));
  }

  // (2) products, 3 CTAs per SM as in run 87.
  {
    const int ctas = 3 * sms;
    std::vector<float> ha(64 * K), hb(128 * K);
    fill(ha, 11);
    fill(hb, 13);
    float *da, *db, *dd;
    CK(cudaMalloc(&da, ha.size() * 4));
    CK(cudaMalloc(&db, hb.size() * 4));
    CK(cudaMalloc(&dd, size_t(ctas) * 64 * 128 * 4));
    CK(cudaMemcpy(da, ha.data(), ha.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, hb.data(), hb.size() * 4, cudaMemcpyHostToDevice));
    struct {
      const char* name;
      void (*fn)(const float*, const float*, float*, int);
      int n, smem;
    } paths[] = {{"wgmma m64n128k8, A and B in shared", product_n128, 128, (64 + 128) * K * 4 + 1024},
                 {"wgmma m64n64k8, A in registers", product_rs, 64, 64 * K * 4 + 1024}};
    for (auto& p : paths) {
      CK(cudaFuncSetAttribute(p.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, p.smem));
      p.fn<<<1, 128, p.smem>>>(da, db, dd, 1);
      CK(cudaDeviceSynchronize());
      std::vector<float> out(64 * p.n);
      CK(cudaMemcpy(out.data(), dd, out.size() * 4, cudaMemcpyDeviceToHost));
      double num = 0, den = 0;
      for (int r = 0; r < 64; ++r)
        for (int c = 0; c < p.n; ++c) {
          double ref = 0;
          for (int k = 0; k < K; ++k) ref += tf32(ha[r * K + k]) * tf32(hb[c * K + k]);
          num += (out[r * p.n + c] - ref) * (out[r * p.n + c] - ref);
          den += ref * ref;
        }
      const double rel = std::sqrt(num / den);
      failures += !(rel < 1e-6);
      int per_sm = 0;
      CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, p.fn, 128, p.smem));
      const float ms = best_ms([&] { p.fn<<<ctas, 128, p.smem>>>(da, db, dd, reps); });
      const double flop = 2.0 * 64 * p.n * K * double(reps) * ctas;
      std::printf("%-42s rel-L2 %.2e %s | %d CTAs/SM, %d CTAs x %d products: %.3f ms, %.1f TFLOP/s\n", p.name, rel,
                  rel < 1e-6 ? "ok" : "WRONG", per_sm, ctas, reps, ms, flop / ms / 1e9);
    }
  }
  return failures ? 1 : 0;
}
