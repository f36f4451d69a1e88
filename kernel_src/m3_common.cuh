// Device helpers shared by the operator kernels: bf16 conversion, warp reductions and scans,
// and a register-tiled block matrix product over shared-memory operands.
#pragma once

#include "m3_params.cuh"

#define M3_DEV __device__ __forceinline__

#ifndef M3_PDL
#define M3_PDL 0
#endif
// M3_PDL (v39): every kernel of a call after the first is launched with programmatic stream
// serialization, so that its CTAs become resident while the kernel before it still runs and the
// launch gap between the two disappears. Such a kernel calls m3_wait_for_previous_kernel before
// it reads (or takes a ticket from) anything the previous kernel writes: it returns once that grid
// has finished and its writes are visible. Launched without the attribute, it returns at once.
// kAlways: emitted whatever M3_PDL says, for the variants whose one programmatic launch is their
// own (v101's reduce, v109's backward).
template <bool kAlways = false>
M3_DEV void m3_wait_for_previous_kernel() {
  if constexpr (M3_PDL || kAlways) asm volatile("griddepcontrol.wait;" ::: "memory");
}
// The next kernel may be launched once every CTA of this grid has passed here (or exited). Each
// kernel calls it at its start: by then all of its own CTAs have been launched, so the next one's
// waiting CTAs take only the SM room this grid no longer needs.
template <bool kAlways = false>
M3_DEV void m3_allow_next_kernel() {
  if constexpr (M3_PDL || kAlways) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

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

// M3_CP_PAIRED_STORES (v177): bf16 results leave two at a time, packed by one cvt.rn.bf16x2.f32
// (round to nearest even, as f2bf; only a NaN's payload differs, the instruction's being the
// canonical one), and the backward's dv and dangles rows as such pairs, one 4-byte store per two
// columns instead of a 2-byte store each with its own 64-bit address (run 130: f2bf was 4.1% of
// the chunk-64 forward's executed instructions, the dv lines about 4% of the backward's).
#ifndef M3_CP_PAIRED_STORES
#define M3_CP_PAIRED_STORES 0
#endif
M3_DEV unsigned f2bf_pair(float lo, float hi) {
#if M3_CP_PAIRED_STORES
  unsigned u;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(hi), "f"(lo));
  return u;
#else
  return static_cast<unsigned>(f2bf(lo)) | (static_cast<unsigned>(f2bf(hi)) << 16);
#endif
}

// IEEE half pairs (M3_CP_HALF_STATES, v252: the entering states the forward hands the backward):
// lo in the low 16 bits, rounded to nearest even; and back, exactly.
M3_DEV unsigned f2h_pair(float lo, float hi) {
  unsigned u;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(hi), "f"(lo));
  return u;
}
// The range guard of everything handed on in half (v252's states, v254's partials): the power of two
// that puts m, the largest |element| of a block, in [2^14, 2^15), and its inverse; 1 for a block of
// zeros or one whose maximum is not finite (fmaxf skips NaN elements; an inf stays inf). Exact to
// apply and to undo.
M3_DEV void half_block_scale(float m, float& scale, float& inverse) {
  scale = inverse = 1.f;
  if (m > 0.f && m <= 3.4e38f) {
    const int e = static_cast<int>((__float_as_uint(m) >> 23) & 0xffu) - 127;  // floor(log2 m); subnormals -127
    const int k = max(min(14 - e, 126), -126);
    scale = __uint_as_float(static_cast<unsigned>(k + 127) << 23);
    inverse = __uint_as_float(static_cast<unsigned>(127 - k) << 23);
  }
}
M3_DEV float2 h2f_pair(unsigned u) {
  float lo, hi;
  asm("{.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h;}"
      : "=f"(lo), "=f"(hi) : "r"(u));
  return make_float2(lo, hi);
}

// dq and dk of one token, four columns: its H per-head partials (rows of QUADS float4 each, from
// dqh and dkh, read through L2: other CTAs of the running kernel wrote them) summed in head order
// h = 0, 1, ..., packed to bf16: the fused backward's (M3_CP_FUSED_HEADS) copy of
// m3_reduce_heads' wide sum, the same operations in the same order and so the same bits. (That
// kernel keeps its own text: routed through here its SASS changed.)
// Returns once *count >= n, read with acquire semantics, polling every kSleepNs nanoseconds. One
// thread waits; the block's barrier after it holds the others back.
template <unsigned kSleepNs>
M3_DEV void m3_wait_for_count(const int* count, int n) {
  for (;;) {
    int done;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(done) : "l"(count) : "memory");
    if (done >= n) break;
    __nanosleep(kSleepNs);
  }
}

// Drops the 128-byte L2 line at `line` (128-byte aligned, global memory) without writing it back:
// for workspace data nothing reads again, whose dirty lines would otherwise cost HBM write
// bandwidth when evicted. Its contents become undefined.
M3_DEV void discard_l2_line(const void* line) { asm volatile("discard.global.L2 [%0], 128;" ::"l"(line) : "memory"); }

// kBatch > 0 (M3_REDUCE_DEEP_LOADS: 8): that many heads' rows of dq and of dk (16 loads) leave
// before any is added, where the unrolled loop below interleaves its adds with its loads (ptxas),
// so that each load waits on the ones before; the sums are in head order either way.
template <int QUADS, int kBatch = 0>
M3_DEV void sum_heads_x4(const float4* dqh, const float4* dkh, int H, m3_bf16* dq, m3_bf16* dk) {
  float4 aq = make_float4(0.f, 0.f, 0.f, 0.f), ak = aq;
  if (kBatch > 0) {
    constexpr int B = kBatch > 0 ? kBatch : 1;
    for (int h0 = 0; h0 < H; h0 += B) {
      float4 x[B], y[B];
#pragma unroll
      for (int k = 0; k < B; ++k) {
        const float4 none = make_float4(0.f, 0.f, 0.f, 0.f);  // past the last head: never added
        x[k] = h0 + k < H ? __ldcg(dqh + (h0 + k) * QUADS) : none;
        y[k] = h0 + k < H ? __ldcg(dkh + (h0 + k) * QUADS) : none;
      }
#pragma unroll
      for (int k = 0; k < B; ++k) {
        if (h0 + k < H) {
          aq.x += x[k].x, aq.y += x[k].y, aq.z += x[k].z, aq.w += x[k].w;
          ak.x += y[k].x, ak.y += y[k].y, ak.z += y[k].z, ak.w += y[k].w;
        }
      }
    }
  } else {
#pragma unroll 8
    for (int h = 0; h < H; ++h) {
      const float4 x = __ldcg(dqh + h * QUADS), y = __ldcg(dkh + h * QUADS);
      aq.x += x.x, aq.y += x.y, aq.z += x.z, aq.w += x.w;
      ak.x += y.x, ak.y += y.y, ak.z += y.z, ak.w += y.w;
    }
  }
  const auto pack = [](float4 v) {
    return make_uint2(static_cast<unsigned>(f2bf(v.x)) | (static_cast<unsigned>(f2bf(v.y)) << 16),
                      static_cast<unsigned>(f2bf(v.z)) | (static_cast<unsigned>(f2bf(v.w)) << 16));
  };
  *reinterpret_cast<uint2*>(dq) = pack(aq);
  *reinterpret_cast<uint2*>(dk) = pack(ak);
}

M3_DEV float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

// M3_FAST_GATE (v89): the forward's output gate, sigmoid(z) on each of a job's C x P elements,
// from the hardware's ex2.approx and rcp.approx (relative error about 2^-21, against the bf16
// results' 2^-9) instead of the IEEE-rounded expf and division, about 20 instructions per
// element (that line was 5.3% of the forward's instructions in run 48). The backward keeps the
// exact form: with the same switch there, its spills grew (stack 104 -> 144 bytes), the pattern
// that cost v67 and v75 their gains.
#ifndef M3_FAST_GATE
#define M3_FAST_GATE 0
#endif
M3_DEV float gate_sigmoidf(float x) {
#if M3_FAST_GATE
  return __fdividef(1.0f, 1.0f + __expf(-x));
#else
  return sigmoidf(x);
#endif
}

// M3_FAST_TRANSCENDENTALS (v174): the angles' tanh, the decays' exp and the backward's gate
// sigmoid (the gradient reaching y, dout z sigmoid(z)) from the hardware's ex2.approx and
// rcp.approx, in every chunk-parallel kernel that computes them (angles, forward, backward).
// Run 130's line profile put the library forms at about 7% of the backward's executed
// instructions and 6% of the chunk-64 forward's (tanhf 4.1% there: a polynomial branch and an exp
// branch, both inlined at each call). Errors: tanh as 1 - 2 / (e^{2|x|} + 1) is off by about 1e-7
// absolute (the cancellation below |x| ~ 1e-3 keeps it absolute), and phi only ever adds
// pi tanh(x) dt; exp is off by about 2^-21 relative plus |x| 2^-24 (the decays' exponents are at
// most a few tens); both far below the tf32 rounding of every product that follows.
#ifndef M3_FAST_TRANSCENDENTALS
#define M3_FAST_TRANSCENDENTALS 0
#endif
M3_DEV float m3_tanhf(float x) {
#if M3_FAST_TRANSCENDENTALS
  const float e = __expf(2.0f * fabsf(x));  // inf beyond |x| ~ 44: the quotient is then 0
  return copysignf(1.0f - __fdividef(2.0f, e + 1.0f), x);
#else
  return tanhf(x);
#endif
}
// exp of a decay's exponent (a difference of chunk-local cumsums of a dt, at most 0).
M3_DEV float m3_decay_expf(float x) {
#if M3_FAST_TRANSCENDENTALS
  return __expf(x);
#else
  return expf(x);
#endif
}
// The backward's gate: the forward's (gate_sigmoidf, M3_FAST_GATE's form) where the switch is on.
#if M3_FAST_TRANSCENDENTALS && !M3_FAST_GATE
#error "M3_FAST_TRANSCENDENTALS takes the backward's gate from M3_FAST_GATE's form"
#endif
M3_DEV float m3_dy_sigmoidf(float x) {
#if M3_FAST_TRANSCENDENTALS
  return gate_sigmoidf(x);
#else
  return sigmoidf(x);
#endif
}

#ifndef M3_FAST_SINCOS
#define M3_FAST_SINCOS 0
#endif
// sin and cos of a rotary angle. The angles inside a chunk stay small (the carry is wrapped into
// [0, 2pi) and a chunk adds at most 32 * pi * max dt, about 10 rad for SPEC's dt), so
// M3_FAST_SINCOS reduces them to [-pi, pi] with a two-part 2pi and uses the hardware
// approximations (absolute error about 4e-7 there, against about 1e-7 for sincosf, both far below
// the tf32 rounding the rotated values meet next). Angles beyond 8192 rad, which other inputs
// could produce, still go through sincosf.
//
// M3_SINCOS_OUTLINE (v168): that sincosf call out of line. Inlined, each call site carried its own
// copy of sincosf's large-argument reduction (about 126 instructions and a local-memory table
// walk), ten copies in v164's backward, none of them ever run on SPEC's inputs; together the
// angles were 1,968 of the backward's 8,600 static instructions, and taking them away took 11% off
// its time (run 124). The same function on the same path: results bitwise unchanged.
#ifndef M3_SINCOS_OUTLINE
#define M3_SINCOS_OUTLINE 0
#endif
// M3_SINCOS_WIDE (v213): the fast path for every angle. Its reduction (k = rint(x / 2 pi), then x
// less k times a two-part 2 pi by fused multiply-adds) keeps the sine within 2e-7 up to 1e7 rad and
// 5e-7 up to 1e8 (tests/python/test_sincos_reduction.py models it), though k's rounding leaves the
// reduced angle past pi there (by up to 0.8 rad at 1e7); past about 1e9 rad an fp32 angle's own
// spacing (64 rad) leaves its sine meaningless anyway. With no slow path, no call site: the
// forward kernels lose their spills (the chunk-64 forward's LDL/STL 3/2 -> 0/0).
#ifndef M3_SINCOS_WIDE
#define M3_SINCOS_WIDE 0
#endif
#if M3_SINCOS_WIDE && !M3_FAST_SINCOS
#error "M3_SINCOS_WIDE widens M3_FAST_SINCOS's path"
#endif
#if M3_SINCOS_OUTLINE && !M3_SINCOS_WIDE
// By value, so that the caller's sin and cos stay in registers (a pointer to them would put them
// in local memory on the fast path too).
__device__ __noinline__ float2 m3_sincos_large(float x) {
  float sn, cs;
  sincosf(x, &sn, &cs);
  return make_float2(sn, cs);
}
#endif
M3_DEV void m3_sincos(float x, float* sn, float* cs) {
#if M3_FAST_SINCOS
  if (M3_SINCOS_WIDE || fabsf(x) <= 8192.f) {
    const float k = rintf(x * 0.159154943091895335769f);
    const float r = fmaf(-k, -1.74845553e-7f, fmaf(-k, 6.28318548f, x));
    __sincosf(r, sn, cs);
    return;
  }
#endif
#if M3_SINCOS_WIDE
  // Not reached: the fast path above takes every angle.
#elif M3_SINCOS_OUTLINE
  const float2 v = m3_sincos_large(x);
  *sn = v.x;
  *cs = v.y;
#else
  sincosf(x, sn, cs);
#endif
}

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

// K independent warp reductions and scans, one shuffle step of all K before the next: a warp's
// reductions are chains of dependent shuffles, and interleaving K of them hides K - 1 of every
// step's latencies. Same butterfly and scan order per value as warp_sum / warp_inclusive_scan.
template <int K>
M3_DEV void warp_sum_n(float (&x)[K]) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
    for (int u = 0; u < K; ++u) x[u] += __shfl_xor_sync(0xffffffffu, x[u], o);
  }
}

// K independent sums over aligned groups of G lanes (G a power of two), interleaved likewise.
template <int K, int G>
M3_DEV void group_sum_n(float (&x)[K]) {
#pragma unroll
  for (int o = G / 2; o > 0; o >>= 1) {
#pragma unroll
    for (int u = 0; u < K; ++u) x[u] += __shfl_xor_sync(0xffffffffu, x[u], o);
  }
}

// group_sum_n over the lanes whose indices differ in the bits of o1..o4, in that order.
template <int K>
M3_DEV void lane_sum_n(float (&x)[K], int o1, int o2, int o3, int o4) {
  const int offsets[4] = {o1, o2, o3, o4};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int u = 0; u < K; ++u) x[u] += __shfl_xor_sync(0xffffffffu, x[u], offsets[i]);
  }
}

template <int K>
M3_DEV void warp_inclusive_scan_n(float (&x)[K]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    float y[K];
#pragma unroll
    for (int u = 0; u < K; ++u) y[u] = __shfl_up_sync(0xffffffffu, x[u], o);
#pragma unroll
    for (int u = 0; u < K; ++u) {
      if (lane >= o) x[u] += y[u];
    }
  }
}

// Two levels instead of block_sum's tree: warp sums, then every thread adds the NT / 32 warp
// totals in warp order. Two barriers instead of log2(NT) + 2; the order is fixed, so the total is
// bitwise repeatable. Ends with a barrier, so `red` may be reused right after.
template <int NT>
M3_DEV float block_sum_two_level(float x, float* red) {
  x = warp_sum(x);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = x;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < NT / 32; ++w) total += red[w];
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

  // fp32 FMAs are already as exact as mac_exact asks.
  template <int K, class FA, class FB>
  M3_DEV void mac_exact(FA fa, FB fb) {
    mac<K>(fa, fb);
  }

  template <class F>
  M3_DEV void for_each(F f) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) f(row(i), col(j), acc[i][j]);
  }
};

// The same contract as RegTile (mac over lambdas, for_each over (row, col, acc)), computed by
// tensor cores: mma.sync m16n8k8 with tf32 operands and fp32 accumulation. tf32 keeps 10 mantissa
// bits, eight times bf16's precision: inside the error budget on sequences of a few thousand
// tokens, not beyond (see mac_exact). The 8 warps are laid out 2 x 4 over the tile; each owns a
// (M/2) x (NC/4) block of 16 x 8 pieces.
#ifndef M3_LEAN_MMA
#define M3_LEAN_MMA 0
#endif
#ifndef M3_TF32_TRUNCATE
#define M3_TF32_TRUNCATE 0
#endif
#if M3_TF32_TRUNCATE && !M3_LEAN_MMA
#error "M3_TF32_TRUNCATE builds on M3_LEAN_MMA"
#endif
#if M3_TF32_TRUNCATE
// M3_TF32_TRUNCATE (v35): the fp32 bits as they are; the tensor core drops the 13 low ones, i.e.
// rounds toward zero. The rounding add was 11% of the backward's instructions (run 33); the
// precision study (methods/results/precision/tf32rz.txt) puts the worst rel-L2 at 2.3e-3 on c01
// against 2.25e-3 rounding to nearest, 3.7e-3 against 3.6e-3 on one sequence of 4096 tokens.
M3_DEV unsigned to_tf32(float x) { return __float_as_uint(x); }
#define M3_MAC_UNROLL _Pragma("unroll")
#elif M3_LEAN_MMA
// Round to nearest, ties away, as cvt.rna does for every finite value: add half of tf32's last
// place and let the tensor core drop the 13 low bits. One integer add instead of cvt.rna's
// compare-and-add sequence, which was a fifth of v5's instructions; the operands, and so the
// products, are bit for bit those of cvt.rna.
M3_DEV unsigned to_tf32(float x) { return __float_as_uint(x) + 0x1000u; }
#define M3_MAC_UNROLL _Pragma("unroll")
#else
M3_DEV unsigned to_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}
#define M3_MAC_UNROLL _Pragma("unroll 2")
#endif

// A shared-memory operand whose 16-byte row pieces feed ldmatrix (M3_LDMATRIX, v41): A(r, k) =
// base[r * ld + k], or B(k, c) = base[c * ld + k] (the rows of the stored tile are B's columns).
// ldmatrix moves 8 x 8 blocks of 16-bit values, i.e. 8 rows x 4 fp32 words, and hands thread
// 4 g + t the word (g, t) of each block: exactly the tf32 fragments of m16n8k8 for these layouts.
// Needs ld % 4 == 0 and 16-byte aligned rows; ld % 32 == 4 (the padded tiles) keeps the eight rows
// of a block in distinct banks.
// `skew` and `flip` (M3_CP_ROWS8): row r starts r * ld + row_skew(r, skew) floats in, and its
// column c sits at c ^ flip where r is odd; both 0 for the plain padded tiles.
M3_DEV int row_skew(int r, int skew) { return ((r >> 2) & 1) * skew; }
struct SmemRowsA {
  const float* base;
  int ld;
  int skew = 0;
  int flip = 0;
};
struct SmemRowsB {
  const float* base;
  int ld;
  int skew = 0;
  int flip = 0;
};

M3_DEV unsigned smem_address(const float* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

M3_DEV void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
M3_DEV void ldmatrix_x2(unsigned (&r)[2], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(addr) : "memory");
}

M3_DEV void mma_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

#ifndef M3_SPLIT_TF32
#define M3_SPLIT_TF32 0
#endif
#ifndef M3_CP_QUAD_COLUMNS
#define M3_CP_QUAD_COLUMNS 0
#endif
#ifndef M3_CP_STORED_MIXING
#define M3_CP_STORED_MIXING 0
#endif
#ifndef M3_CP_SWIZZLED_HALVES
#define M3_CP_SWIZZLED_HALVES 0
#endif
#ifndef M3_CP_ROW_PAIRED_LANES
#define M3_CP_ROW_PAIRED_LANES 0
#endif
// M3_CP_ROWS8 (v138): the q/k and v/dy tiles' rows are N + 8 and P + 8 floats apart (8 mod 32),
// and row r has 4 more floats before it when bit 2 of r is set (v140's level: m3_chunk_scan.cuh).
// Lanes (g, t) reading element (k0 + t, n0 + 8 j + g), as the scalar tf32 operands read rows along
// k, then meet banks 8 t + g (32 distinct; 4 t + g, two lanes a bank, at the padding of 4), and the
// eight rows of an ldmatrix block still lie in eight distinct 16-byte bank groups (the skew puts
// rows 4-7 on the odd ones).
#ifndef M3_CP_ROWS8
#define M3_CP_ROWS8 0
#endif
// M3_CP_SPREAD_K: the products whose two operands are both read element by element along k
// take MmaTile::mac_spread_k's k order. 1 (v75): the forward's chunk-state product and the
// backward's dv intra, dks intra and state-gradient products; 2 (v77): all but the last; 3 (v79):
// the forward's alone.
#ifndef M3_CP_SPREAD_K
#define M3_CP_SPREAD_K 0
#endif
// x = big + small, both tf32 (round to nearest): big's bits, and small's, ready for mma.
M3_DEV void split_tf32(float x, unsigned& big, unsigned& small) {
  const unsigned b = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
  big = b;
  small = __float_as_uint(x - __uint_as_float(b)) + 0x1000u;
}

// The P x N states handed from chunk to chunk in fragment order (M3_CP_FRAG_STATES, and
// M3_CP_FRAG_DSTATES for the state gradients alone): every 32 columns form eight 16-byte words,
// and word frag_word(g) holds the columns g + 8 i, i = 0..3. A tensor-core fragment reads, per
// thread, the columns g + 8 i of one row (four n-tiles) or t + 8 i (four k-steps): in this order
// each is one 16-byte load, where the row-major order needs four scattered 4-byte loads.
#ifndef M3_CP_FULL_SECTORS
#define M3_CP_FULL_SECTORS 0
#endif
// v27: word g. M3_CP_FULL_SECTORS (v29): the words of g = 2 t and 2 t + 1 four apart, so that the
// four lanes of a row that store their g = 2 t words, and then their g = 2 t + 1 words, each
// write 64 contiguous bytes: whole 32-byte sectors per store instruction where v27 writes half of
// every sector twice (run 31: its forward, whose chunk chain waits on those stores, lost about
// 1 us per chunk).
M3_DEV int frag_word(int g) { return M3_CP_FULL_SECTORS ? ((g & 1) << 2) | (g >> 1) : g; }
// The inverse: the g whose columns word w holds.
M3_DEV int frag_col(int w) { return M3_CP_FULL_SECTORS ? ((w & 3) << 1) | (w >> 2) : w; }

// v's component s, for an s the unrolled loops know at compile time.
M3_DEV float quad_at(const float4& v, int s) { return s == 0 ? v.x : s == 1 ? v.y : s == 2 ? v.z : v.w; }

// M3_OPAQUE_TILE_TID (v216): every MmaTile reads its thread index afresh (a volatile read the
// compiler may not merge), so two products that address the same rows in different phases each
// derive their own addresses instead of holding the first product's across the phases between,
// which ptxas spilled in v210's backward (six values, four of them shared-memory addresses, stored
// at the state update's product and reloaded at the inter product's). M3_OPAQUE_TILE_TID=2
// (v222): every thread-index read of m3_chunk_scan.cuh and m3_chunk_parallel.cuh too (M3_TID), so
// that no index derived from it (lanes, warps, rows of the staging) lives across phases either.
#ifndef M3_OPAQUE_TILE_TID
#define M3_OPAQUE_TILE_TID 0
#endif
#if M3_OPAQUE_TILE_TID
M3_DEV int m3_tile_tid() {
  int tid;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid));
  return tid;
}
#endif
#if M3_OPAQUE_TILE_TID >= 2
#define M3_TID() m3_tile_tid()
#else
#define M3_TID() threadIdx.x
#endif

template <int M, int NC, int NT>
struct MmaTile {
  static_assert(NT == 256, "MmaTile lays 8 warps out 2 x 4");
  static constexpr int WM = M / 2;
  static constexpr int WN = NC / 4;
  static constexpr int MT = WM / 16;
  static constexpr int NTL = WN / 8;
  static_assert(MT * 16 == WM && NTL * 8 == WN && MT > 0 && NTL > 0, "tile not divisible into 16 x 8 pieces");
  float acc[MT][NTL][4];
  int m0, n0, g, t;

  M3_DEV MmaTile() {
#if M3_OPAQUE_TILE_TID
    const int tid = m3_tile_tid(), warp = tid >> 5, lane = tid & 31;
#else
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#endif
    m0 = (warp >> 2) * WM;
    n0 = (warp & 3) * WN;
    g = lane >> 2;
    t = lane & 3;
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int j = 0; j < NTL; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
  }

  template <int K, class FA, class FB>
  M3_DEV void mac(FA fa, FB fb) {
    static_assert(K % 8 == 0, "K must be a multiple of 8");
    // Fully unrolled (M3_LEAN_MMA), every operand address is a base plus an immediate.
    M3_MAC_UNROLL
    for (int k0 = 0; k0 < K; k0 += 8) {
      unsigned a[MT][4], b[NTL][2];
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        const int r = m0 + i * 16 + g;
        a[i][0] = to_tf32(fa(r, k0 + t));
        a[i][1] = to_tf32(fa(r + 8, k0 + t));
        a[i][2] = to_tf32(fa(r, k0 + t + 4));
        a[i][3] = to_tf32(fa(r + 8, k0 + t + 4));
      }
#pragma unroll
      for (int j = 0; j < NTL; ++j) {
        const int c = n0 + j * 8 + g;
        b[j][0] = to_tf32(fb(k0 + t, c));
        b[j][1] = to_tf32(fb(k0 + t + 4, c));
      }
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NTL; ++j) mma_tf32(acc[i][j], a[i], b[j]);
    }
  }

  // mac for A(r, k) and B(k, c) both read element by element at k * ld + (r or c), ld = 4 (mod
  // 32): mac's k = k0 + t puts lane (g, t) on bank 4 t + g, two lanes per bank. Here each k-step
  // of a block of 32 takes k = 2 t + {0, 16, 1, 17} (and + 8 for the second register): bank
  // 8 t + g, all 32 distinct. The same products, summed in other groups of eight.
  template <int K, class FA, class FB>
  M3_DEV void mac_spread_k(FA fa, FB fb) {
    static_assert(K % 32 == 0, "K must be a multiple of 32");
    M3_MAC_UNROLL
    for (int k0 = 0; k0 < K; k0 += 8) {
      const int step = (k0 >> 3) & 3;
      const int k = (k0 & ~31) + 2 * t + (step & 1) + ((step >> 1) << 4);
      unsigned a[MT][4], b[NTL][2];
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        const int r = m0 + i * 16 + g;
        a[i][0] = to_tf32(fa(r, k));
        a[i][1] = to_tf32(fa(r + 8, k));
        a[i][2] = to_tf32(fa(r, k + 8));
        a[i][3] = to_tf32(fa(r + 8, k + 8));
      }
#pragma unroll
      for (int j = 0; j < NTL; ++j) {
        const int c = n0 + j * 8 + g;
        b[j][0] = to_tf32(fb(k, c));
        b[j][1] = to_tf32(fb(k + 8, c));
      }
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NTL; ++j) mma_tf32(acc[i][j], a[i], b[j]);
    }
  }

  // The a fragments of k-step k0, rounded for the tensor cores (mac's loads, in mac's order).
  template <class FA>
  M3_DEV void a_fragments(FA fa, int k0, unsigned (&a)[MT][4]) const {
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      const int r = m0 + i * 16 + g;
      a[i][0] = to_tf32(fa(r, k0 + t));
      a[i][1] = to_tf32(fa(r + 8, k0 + t));
      a[i][2] = to_tf32(fa(r, k0 + t + 4));
      a[i][3] = to_tf32(fa(r + 8, k0 + t + 4));
    }
  }

  // The same fragments by ldmatrix, one x4 per 16-row block: lane l points at row l % 8 of block
  // l / 8, blocks ordered (rows 0-7, k 0-3), (rows 8-15, k 0-3), (rows 0-7, k 4-7), (rows 8-15,
  // k 4-7) as a[i][0..3].
  M3_DEV void a_fragments(const SmemRowsA& fa, int k0, unsigned (&a)[MT][4]) const {
    const int lane = 4 * g + t;
    const int row = m0 + (lane & 7) + (lane & 8);  // bit 2 of row + 16 i is row's: one skew for all i
    const unsigned base =
        smem_address(fa.base + row * fa.ld + row_skew(row, fa.skew) + (((lane >> 4) << 2) ^ ((row & 1) * fa.flip)));
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      ldmatrix_x4(a[i], base + 4u * static_cast<unsigned>(i * 16 * fa.ld + k0));
#pragma unroll
      for (int e = 0; e < 4; ++e) a[i][e] = to_tf32(__uint_as_float(a[i][e]));
    }
  }

  // b[j] = (B(k0 + t, c), B(k0 + t + 4, c)), c = n0 + 8 j + g.
  template <class FB>
  M3_DEV void b_fragments(FB fb, int k0, unsigned (&b)[NTL][2]) const {
#pragma unroll
    for (int j = 0; j < NTL; ++j) {
      const int c = n0 + j * 8 + g;
      b[j][0] = to_tf32(fb(k0 + t, c));
      b[j][1] = to_tf32(fb(k0 + t + 4, c));
    }
  }
  // By ldmatrix: an x4 per two n-tiles (lane l at stored row n0 + 8 (l / 16) + l % 8, k half
  // (l / 8) % 2), an x2 for an odd last one.
  M3_DEV void b_fragments(const SmemRowsB& fb, int k0, unsigned (&b)[NTL][2]) const {
    const int lane = 4 * g + t;
    const int row = n0 + ((lane >> 4) << 3) + (lane & 7);  // bit 2 of row + 8 j is row's
    const unsigned base = smem_address(fb.base + row * fb.ld + row_skew(row, fb.skew) + (((lane & 8) / 2) ^ ((row & 1) * fb.flip)));
#pragma unroll
    for (int j = 0; j + 1 < NTL; j += 2) {
      unsigned r[4];
      ldmatrix_x4(r, base + 4u * static_cast<unsigned>(j * 8 * fb.ld + k0));
      b[j][0] = r[0], b[j][1] = r[1], b[j + 1][0] = r[2], b[j + 1][1] = r[3];
    }
    if (NTL % 2 == 1) {
      ldmatrix_x2(b[NTL - 1], base + 4u * static_cast<unsigned>((NTL - 1) * 8 * fb.ld + k0));
    }
#pragma unroll
    for (int j = 0; j < NTL; ++j) b[j][0] = to_tf32(__uint_as_float(b[j][0])), b[j][1] = to_tf32(__uint_as_float(b[j][1]));
  }

  // mac with A read by ldmatrix and B by ldmatrix or element by element (the two overloads of mac
  // below): the same products in the same order.
  template <int K, class FA, class FB>
  M3_DEV void mac_fragments(const FA& fa, const FB& fb) {
    static_assert(K % 8 == 0, "K must be a multiple of 8");
    M3_MAC_UNROLL
    for (int k0 = 0; k0 < K; k0 += 8) {
      unsigned a[MT][4], b[NTL][2];
      a_fragments(fa, k0, a);
      b_fragments(fb, k0, b);
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NTL; ++j) mma_tf32(acc[i][j], a[i], b[j]);
    }
  }
  template <int K, class FB>
  M3_DEV void mac(SmemRowsA fa, FB fb) {
    mac_fragments<K>(fa, fb);
  }
  template <int K>
  M3_DEV void mac(SmemRowsA fa, SmemRowsB fb) {
    mac_fragments<K>(fa, fb);
  }

  // acc += A B with B(k, c) = S[c][k], S a state in fragment order whose 16-byte word at row r,
  // position pos (a multiple of 4) ld4(r, pos) returns: a thread's b fragments of four k-steps
  // are two words per n-tile. The products, and their order, are mac's.
  template <int K, class FA, class LD4>
  M3_DEV void mac_frag_rows(FA fa, LD4 ld4) {
    static_assert(K % 32 == 0, "K must be a multiple of 32");
    M3_MAC_UNROLL
    for (int k32 = 0; k32 < K; k32 += 32) {
      float4 lo[NTL], hi[NTL];
#pragma unroll
      for (int j = 0; j < NTL; ++j) {
        const int c = n0 + j * 8 + g;
        lo[j] = ld4(c, k32 + 4 * frag_word(t));      // columns k32 + 8 s + t
        hi[j] = ld4(c, k32 + 4 * frag_word(t + 4));  // columns k32 + 8 s + t + 4
      }
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const int k0 = k32 + 8 * s;
        unsigned a[MT][4], b[NTL][2];
        a_fragments(fa, k0, a);
#pragma unroll
        for (int j = 0; j < NTL; ++j) {
          b[j][0] = to_tf32(quad_at(lo[j], s));
          b[j][1] = to_tf32(quad_at(hi[j], s));
        }
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
          for (int j = 0; j < NTL; ++j) mma_tf32(acc[i][j], a[i], b[j]);
      }
    }
  }

  // acc += A B with A(r, k) = a_rows[r * lda + k] in shared memory and B(k, c) = S[c][k] for a
  // row-major S read as 16-byte words ld4(c, k) (M3_CP_FWD_GLOBAL_STATE=2): in each block of 32 k
  // a thread takes the eight contiguous k = 8 t + 0..7, k-step s holding k = 8 t + 2 s in slot t
  // and 8 t + 2 s + 1 in slot t + 4. So a row of A is two 16-byte shared loads per block (lanes
  // (g, t) on banks 4 g + 8 t: conflict-free quarters for lda = 4 mod 32) and a column of B two
  // 16-byte global loads, one 32-byte sector. The same products as mac's, summed in other groups
  // of eight.
  template <int K, class LD4>
  M3_DEV void mac_rows_contiguous_k(const float* a_rows, int lda, LD4 ld4) {
    static_assert(K % 32 == 0, "K must be a multiple of 32");
    M3_MAC_UNROLL
    for (int k32 = 0; k32 < K; k32 += 32) {
      const int k = k32 + 8 * t;
      float4 alo[MT][2], ahi[MT][2], blo[NTL], bhi[NTL];
#pragma unroll
      for (int i = 0; i < MT; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float* row = a_rows + (m0 + i * 16 + g + 8 * h) * lda + k;
          alo[i][h] = *reinterpret_cast<const float4*>(row);
          ahi[i][h] = *reinterpret_cast<const float4*>(row + 4);
        }
      }
#pragma unroll
      for (int j = 0; j < NTL; ++j) {
        const int c = n0 + j * 8 + g;
        blo[j] = ld4(c, k);
        bhi[j] = ld4(c, k + 4);
      }
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        // Elements 2 s and 2 s + 1 of the thread's eight: in the low word for s < 2.
        const auto pick = [&](const float4& lo, const float4& hi, int e) {
          return quad_at(s < 2 ? lo : hi, (2 * s + e) & 3);
        };
        unsigned a[MT][4], b[NTL][2];
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          a[i][0] = to_tf32(pick(alo[i][0], ahi[i][0], 0));
          a[i][1] = to_tf32(pick(alo[i][1], ahi[i][1], 0));
          a[i][2] = to_tf32(pick(alo[i][0], ahi[i][0], 1));
          a[i][3] = to_tf32(pick(alo[i][1], ahi[i][1], 1));
        }
#pragma unroll
        for (int j = 0; j < NTL; ++j) {
          b[j][0] = to_tf32(pick(blo[j], bhi[j], 0));
          b[j][1] = to_tf32(pick(blo[j], bhi[j], 1));
        }
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
          for (int j = 0; j < NTL; ++j) mma_tf32(acc[i][j], a[i], b[j]);
      }
    }
  }

  // acc += A B with B(k, c) = S[k][c], S in fragment order (ld4 as above): a thread's four
  // n-tiles of one k row are one 16-byte word. The products, and their order, are mac's.
  template <int K, class FA, class LD4>
  M3_DEV void mac_frag_cols(FA fa, LD4 ld4) {
    mac_b_words<K>(fa, ld4, [&] { return n0 + 4 * frag_word(g); });
  }

  // acc += A B where a thread's b fragments of k row k are the four components of the 16-byte
  // word ld4(k, pos()), component j for n-tile j (mac_frag_cols, MmaQuadTile::mac4).
  template <int K, class FA, class LD4, class Pos>
  M3_DEV void mac_b_words(FA fa, LD4 ld4, Pos pos) {
    static_assert(K % 8 == 0, "K must be a multiple of 8");
    static_assert(NTL == 4, "one 16-byte word holds a thread's four n-tiles");
    M3_MAC_UNROLL
    for (int k0 = 0; k0 < K; k0 += 8) {
      unsigned a[MT][4], b[NTL][2];
      a_fragments(fa, k0, a);
      const float4 b0 = ld4(k0 + t, pos()), b1 = ld4(k0 + t + 4, pos());
#pragma unroll
      for (int j = 0; j < NTL; ++j) {
        b[j][0] = to_tf32(quad_at(b0, j));
        b[j][1] = to_tf32(quad_at(b1, j));
      }
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NTL; ++j) mma_tf32(acc[i][j], a[i], b[j]);
    }
  }

#if M3_SPLIT_TF32
  // acc += A B to about fp32 accuracy: each operand x = big + small with both halves tf32
  // (big keeps x's top 11 significant bits, small the next 11), and three products
  // big*big + big*small + small*big; the dropped small*small is 2^-22 relative. The angle gradient
  // is a sum over token pairs of terms that cancel exactly in pairs (the scores depend on
  // phi[t] - phi[s] only), so its per-term rounding, 2^-11 with plain tf32, would not average
  // away: it grows like sqrt(L) against a bounded result (dangles at 1.3e-2 for L = 65536).
  template <int K, class FA, class FB>
  M3_DEV void mac_exact(FA fa, FB fb) {
    static_assert(K % 8 == 0, "K must be a multiple of 8");
    M3_MAC_UNROLL
    for (int k0 = 0; k0 < K; k0 += 8) {
      unsigned ab[MT][4], as[MT][4], bb[NTL][2], bs[NTL][2];
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        const int r = m0 + i * 16 + g;
        split_tf32(fa(r, k0 + t), ab[i][0], as[i][0]);
        split_tf32(fa(r + 8, k0 + t), ab[i][1], as[i][1]);
        split_tf32(fa(r, k0 + t + 4), ab[i][2], as[i][2]);
        split_tf32(fa(r + 8, k0 + t + 4), ab[i][3], as[i][3]);
      }
#pragma unroll
      for (int j = 0; j < NTL; ++j) {
        const int c = n0 + j * 8 + g;
        split_tf32(fb(k0 + t, c), bb[j][0], bs[j][0]);
        split_tf32(fb(k0 + t + 4, c), bb[j][1], bs[j][1]);
      }
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NTL; ++j) {
          mma_tf32(acc[i][j], as[i], bb[j]);
          mma_tf32(acc[i][j], ab[i], bs[j]);
          mma_tf32(acc[i][j], ab[i], bb[j]);
        }
    }
  }
#else
  template <int K, class FA, class FB>
  M3_DEV void mac_exact(FA fa, FB fb) {
    mac<K>(fa, fb);
  }
#endif

  // f(i, h, row) for the rows a thread holds: row m0 + 16 i + g + 8 h, whose accumulators are
  // acc[i][j][2 h] and acc[i][j][2 h + 1] (columns n0 + 8 j + 2 t and the one after).
  template <class F>
  M3_DEV void for_each_row(F f) {
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) f(i, h, m0 + i * 16 + g + (h << 3));
  }

  // f(row, col, acc at col, acc at col + 1), col even: the two columns a thread holds side by
  // side, for 8-byte accesses. Elements in memory order (zip_for_each relies on it).
  template <class F>
  M3_DEV void for_each_pair(F f) {
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int j = 0; j < NTL; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          f(m0 + i * 16 + g + (h << 3), n0 + j * 8 + 2 * t, acc[i][j][2 * h], acc[i][j][2 * h + 1]);
  }

  // Row sums (kRows) or column sums of f(row, col, acc), straight from the accumulators, as
  // per-warp partials. Rows: part[(warp & 3) * M + row], over the columns one warp column holds,
  // four partials per row (a quad shares a row: two shuffles). Columns: part[(warp >> 2) * NC +
  // col], over the rows one warp row holds, two partials per column (three shuffles).
  // col(j, e) is the column of acc[i][j][e + 2 h]: MmaTile's own for the column sums, which rely on
  // it; the row sums take any (MmaQuadTile's).
  template <bool kRows, class F, class Col>
  M3_DEV void line_sums(float* part, F f, Col col) {
    constexpr int kLines = kRows ? MT : NTL;
    float sums[kLines][2];
#pragma unroll
    for (int l = 0; l < kLines; ++l) sums[l][0] = sums[l][1] = 0.f;
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int j = 0; j < NTL; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float v = f(m0 + i * 16 + g + ((e >> 1) << 3), col(j, e & 1), acc[i][j][e]);
          if constexpr (kRows) {
            sums[i][e >> 1] += v;
          } else {
            sums[j][e & 1] += v;
          }
        }
#pragma unroll
    for (int l = 0; l < kLines; ++l)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int o = kRows ? 1 : 4; o < (kRows ? 4 : 32); o <<= 1) sums[l][h] += __shfl_xor_sync(0xffffffffu, sums[l][h], o);
    const int warp = threadIdx.x >> 5;
    if ((kRows ? t : g) != 0) return;
#pragma unroll
    for (int l = 0; l < kLines; ++l)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if constexpr (kRows) {
          part[(warp & 3) * M + m0 + l * 16 + g + 8 * h] = sums[l][h];
        } else {
          part[(warp >> 2) * NC + n0 + l * 8 + 2 * t + h] = sums[l][h];
        }
      }
  }
  M3_DEV int acc_col(int j, int e) const { return n0 + j * 8 + 2 * t + e; }
  template <class F>
  M3_DEV void row_sums(float* part, F f) {
    line_sums<true>(part, f, [&](int j, int e) { return acc_col(j, e); });
  }
  template <class F>
  M3_DEV void col_sums(float* part, F f) {
    line_sums<false>(part, f, [&](int j, int e) { return acc_col(j, e); });
  }

  // Written out rather than through for_each_pair: the nested lambda schedules the code of every
  // tile visit differently (checked on the cubins), and the measured variants keep their code.
  template <class F>
  M3_DEV void for_each(F f) {
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int j = 0; j < NTL; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          f(m0 + i * 16 + g + ((e >> 1) << 3), n0 + j * 8 + 2 * t + (e & 1), acc[i][j][e]);
  }
};

#if M3_CP_QUAD_COLUMNS
// MmaTile whose n-tile j holds the columns n0 + 4 q + j (q = 0..7) instead of n0 + 8 j + q
// (M3_CP_QUAD_COLUMNS, v67): a thread's four n-tiles are four adjacent columns, so its b fragments
// of one k row are one 16-byte load from a row-major operand (MmaTile's scalar b fragments are
// four loads, each with its own address arithmetic), and its accumulators of one row are two
// 16-byte words. Every accumulator is the sum MmaTile forms for its column, in the same order;
// only which thread holds it changes (and so the order of row_sums' additions).
template <int M, int NC, int NT>
struct MmaQuadTile : MmaTile<M, NC, NT> {
  using Base = MmaTile<M, NC, NT>;
  using Base::MT;
  using Base::NTL;
  using Base::acc;
  using Base::m0;
  using Base::n0;
  using Base::g;
  using Base::t;
  static_assert(NTL == 4, "a thread's four n-tiles are one 16-byte column group");

  // The first of the four adjacent columns of accumulator half e (acc[i][j][e + 2 h], j = 0..3).
  M3_DEV int quad_col(int e) const { return n0 + 8 * t + 4 * e; }

  // acc += A B with A by ldmatrix and fb4(k, c) = (B(k, c), .., B(k, c + 3)), c a multiple of 4.
  template <int K, class FB4>
  M3_DEV void mac4(const SmemRowsA& fa, FB4 fb4) {
    this->template mac_b_words<K>(fa, fb4, [&] { return n0 + 4 * g; });
  }

  // f(row, first column, the four accumulators of columns first .. first + 3).
  template <class F>
  M3_DEV void for_each_quad(F f) {
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          f(m0 + i * 16 + g + (h << 3), quad_col(e),
            make_float4(acc[i][0][2 * h + e], acc[i][1][2 * h + e], acc[i][2][2 * h + e], acc[i][3][2 * h + e]));
  }

  // MmaTile::row_sums for this column order: part[(warp & 3) * M + row], four partials per row.
  template <class F>
  M3_DEV void row_sums(float* part, F f) {
    this->template line_sums<true>(part, f, [&](int j, int e) { return quad_col(e) + j; });
  }
};
#endif

// Visits two tensor-core tiles of one type by the column pairs a thread holds (for_each_pair):
// f(row, col, a at col, a at col + 1, b at col, b at col + 1), col even.
template <class Tile, class F>
M3_DEV void zip_for_each_pair(Tile& a, Tile& b, F f) {
  const float* pb = reinterpret_cast<const float*>(&b.acc);
  int idx = 0;
  a.for_each_pair([&](int r, int c, float a0, float a1) {
    f(r, c, a0, a1, pb[idx], pb[idx + 1]);
    idx += 2;
  });
}

// Visits two tiles of one type element by element: f(row, col, acc_a, acc_b).
template <class Tile, class F>
M3_DEV void zip_for_each(Tile& a, Tile& b, F f) {
  // Both tile types keep acc contiguous and visit it in memory order.
  float* pa = reinterpret_cast<float*>(&a.acc);
  float* pb = reinterpret_cast<float*>(&b.acc);
  int idx = 0;
  a.for_each([&](int r, int c, float) {
    f(r, c, pa[idx], pb[idx]);
    ++idx;
  });
}
