// Hopper warpgroup tile products (wgmma, sm_90a) on tf32 operands that stay in shared memory.
//
// Why: runs 48 and 86 found the chunk kernels bound by the SM's L1 data pipe (72.7% of its
// wavefront peak for v104's forward, 80.7% at three CTAs per SM with no gain), in part the tile
// products' scalar operand loads, each fragment loaded by every warp that needs it. A warpgroup
// product reads each operand byte once, straight from shared memory into the tensor cores: run 87
// measured a 64 x 64 x 128 product at 515 shared wavefronts against 1,282 for mma.sync with scalar
// operand loads, and 3.1x the rate (471 against 152 TFLOP/s). The reads still go through the same
// pipe (95.6% busy there), so operand bytes per FLOP stay the currency. This header is the building
// block of the next kernels; m3_wgmma_probe.cuh checks its layout and descriptors on the device.
//
// Operand layout: a K-major tile of R rows (R a multiple of 8) and K fp32 columns (K a multiple of
// 32) in the 128-byte swizzle. The tile is a sequence of K / 32 blocks of 32 columns; a block holds
// every row as 128 contiguous bytes, and the 16-byte chunk c of row r sits at chunk c ^ (r % 8).
// Tiles must start on 1024 bytes (the swizzle is applied to absolute address bits).
#pragma once

#ifndef M3_DEV
#define M3_DEV __device__ __forceinline__
#endif

namespace m3wg {

// The float index of (r, k) in a swizzled K-major tile of `rows` rows.
M3_DEV int sw128_index(int rows, int r, int k) {
  return (k >> 5) * rows * 32 + r * 32 + ((((k >> 2) & 7) ^ (r & 7)) << 2) + (k & 3);
}

// Shared-memory matrix descriptor: start address, leading byte offset 16 (unused by swizzled
// K-major operands), stride byte offset 1024 (from one 8-row group to the next), 128-byte swizzle.
M3_DEV unsigned long long sw128_descriptor(unsigned smem_address) {
  return static_cast<unsigned long long>((smem_address & 0x3FFFFu) >> 4) | (1ull << 16) | (64ull << 32) |
         (1ull << 62);
}

// The descriptor of k-step s (eight tf32 columns, 32 bytes) of a tile at `tile_address`: block s / 4,
// then 32 bytes a step inside the block, before the swizzle (as the hardware applies it).
M3_DEV unsigned long long sw128_kstep(unsigned tile_address, int rows, int s) {
  return sw128_descriptor(tile_address + static_cast<unsigned>((s >> 2) * rows * 128 + (s & 3) * 32));
}

// The same descriptor from the low word of the tile's first (sw128_descriptor(tile_address)) by
// one 32-bit add: the address field holds address / 16 in 14 bits, and a tile and its offsets
// stay below the 256 KB those bits span, so the add never carries out of the field; the high word
// (stride and swizzle) is the same constant for every step.
M3_DEV unsigned long long sw128_kstep_from(unsigned base_low, int rows, int s) {
  const unsigned low = base_low + static_cast<unsigned>(((s >> 2) * rows * 128 + (s & 3) * 32) >> 4);
  return (static_cast<unsigned long long>(64u | (1u << 30)) << 32) | low;
}

// Orders this thread's earlier generic shared-memory stores before later async-proxy reads
// (wgmma operands, TMA stores). A barrier must still follow for the other threads' stores.
M3_DEV void fence_shared_for_async_proxy() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// Zeroes an accumulator by one immediate move a register. Plain `d[e] = 0.f` let the compiler copy
// every zero from one register, at times another product's accumulator, and ptxas then injected
// warpgroup waits and arrives around the products (C7517, C7519: "to allow use of registers").
template <int K>
M3_DEV void zero_accumulator(float (&d)[K]) {
#pragma unroll
  for (int e = 0; e < K; ++e) asm volatile("mov.b32 %0, 0;" : "=f"(d[e]));
}

// Before the first wgmma of a batch: the accumulator registers written by ordinary code are ready.
M3_DEV void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
M3_DEV void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int Pending>
M3_DEV void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(Pending) : "memory");
}

// D(64 x 64) += A(64 x 8) B(8 x 64), A and B^T K-major in shared memory (both tf32: the hardware
// reads the top 19 bits of each fp32 word). Warp w of the warpgroup holds rows 16 w + g and
// 16 w + g + 8 (g = lane / 4) as in mma.sync's m16n8 accumulator, for each block j of 8 columns:
// d[4 j + 0..1] = (16 w + g, 8 j + 2 t + 0..1), d[4 j + 2..3] = (16 w + g + 8, same), t = lane % 4.
// With accumulate == false the product overwrites d.
M3_DEV void wgmma_m64n64k8_tf32(float (&d)[32], unsigned long long a, unsigned long long b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
}

// D(64 x 128) += A(64 x 8) B(8 x 128), both in shared memory: the accumulator as above, 16 blocks of
// 8 columns. Checked on the device by run 88's benchmark (methods/results/run88/staging_bench.cu).
M3_DEV void wgmma_m64n128k8_tf32(float (&d)[64], unsigned long long a, unsigned long long b) {
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

// D(64 x 64) += A(64 x 8) B(8 x 64) with A in registers: warp w's thread (g, t) holds A(16 w + g, t),
// A(16 w + g + 8, t), A(16 w + g, t + 4), A(16 w + g + 8, t + 4) of the k-step, as mma.sync's
// m16n8k8 tf32 A fragment. Only B is read from shared memory (run 88: 261 wavefronts a 64 x 64 x 128
// product against 515 with both operands there).
M3_DEV void wgmma_m64n64k8_tf32_rs(float (&d)[32], float a0, float a1, float a2, float a3, unsigned long long b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, 1, 1, 1;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(__float_as_uint(a0)), "r"(__float_as_uint(a1)), "r"(__float_as_uint(a2)), "r"(__float_as_uint(a3)),
        "l"(b));
}

// D(64 x 32) += A(64 x 8) B(8 x 32), both in shared memory; the accumulator as above, 4 blocks of
// 8 columns. For the chunk-64 forward (m3_forward64.cuh): its products that a warpgroup takes one
// 32-token half of.
M3_DEV void wgmma_m64n32k8_tf32(float (&d)[16], unsigned long long a, unsigned long long b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, 1, 1, 1;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(a), "l"(b));
}

// D(64 x 32) += A(64 x 8) B(8 x 32) with A in registers, laid out as for wgmma_m64n64k8_tf32_rs.
M3_DEV void wgmma_m64n32k8_tf32_rs(float (&d)[16], float a0, float a1, float a2, float a3, unsigned long long b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
      "{%16, %17, %18, %19}, %20, 1, 1, 1;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(__float_as_uint(a0)), "r"(__float_as_uint(a1)), "r"(__float_as_uint(a2)), "r"(__float_as_uint(a3)),
        "l"(b));
}

// Writes a warpgroup's 64 x N accumulator (N / 2 floats a thread, in the order described at
// wgmma_m64n64k8_tf32) to a row-major matrix with leading dimension ld, 8 bytes at a time.
template <int N>
M3_DEV void store_accumulator(const float (&d)[N / 2], float* out, int ld) {
  const int w = (threadIdx.x % 128) / 32, g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
    const int r = 16 * w + g, c = 8 * j + 2 * t;
    *reinterpret_cast<float2*>(out + r * ld + c) = make_float2(d[4 * j], d[4 * j + 1]);
    *reinterpret_cast<float2*>(out + (r + 8) * ld + c) = make_float2(d[4 * j + 2], d[4 * j + 3]);
  }
}

// Row r of a staged matrix lands in row r of its tile, unless a row map says otherwise.
struct SameRow {
  M3_DEV int operator()(int r) const { return r; }
};

// Copies a row-major rows x K fp32 matrix from global memory into a swizzled tile, 16 bytes a
// thread at a time (a 16-byte chunk never straddles the swizzle), with `threads` threads; row r
// goes to tile row row_of(r) (a permutation of the rows, such as the design note's KS^T order).
template <int Rows, int K, int Threads, class RowOf = SameRow>
M3_DEV void stage_sw128(const float* src, float* tile, RowOf row_of = RowOf()) {
  static_assert(Rows % 8 == 0 && K % 32 == 0, "swizzled tiles hold 8-row groups of 32-column blocks");
  for (int i = threadIdx.x; i < Rows * K / 4; i += Threads) {
    const int r = i / (K / 4), k = 4 * (i % (K / 4));
    *reinterpret_cast<float4*>(tile + sw128_index(Rows, row_of(r), k)) =
        __ldg(reinterpret_cast<const float4*>(src + static_cast<long long>(r) * K + k));
  }
}

}  // namespace m3wg
