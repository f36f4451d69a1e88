// The argument block of the operator kernels, and the v1 shared-memory layout. Included by the
// host dispatcher (plain C++) and by NVRTC-compiled kernels, so it holds only plain C types.
#pragma once

typedef unsigned short m3_bf16;  // raw bf16 bits; kernels convert explicitly

struct M3Params {
  // inputs (see SPEC section 1 for shapes)
  const m3_bf16* q;
  const m3_bf16* k;
  const m3_bf16* v;
  const float* adt;
  const float* dt;
  const m3_bf16* trap;
  const float* q_bias;
  const float* k_bias;
  const m3_bf16* angles;
  const float* d;
  const m3_bf16* z;
  const int* cu_seqlens;
  const m3_bf16* dout;
  const m3_bf16* dfinal_angle;
  const float* dfinal_ssm;
  const float* dfinal_k;
  const m3_bf16* dfinal_v;
  // results
  m3_bf16* output;
  m3_bf16* final_angle;
  float* final_ssm;
  float* final_k;
  m3_bf16* final_v;
  m3_bf16* dq;
  m3_bf16* dk;
  m3_bf16* dv;
  float* dadt;
  float* ddt;
  m3_bf16* dtrap;
  float* dq_bias;
  float* dk_bias;
  m3_bf16* dangles;
  float* dd;
  m3_bf16* dz;
  // workspace (v1)
  float* ws_states;   // [total_chunks][H][P][N]: the SSM state entering each chunk
  float* ws_phi;      // [total_chunks][H][A]: the angle sum entering each chunk
  float* ws_dqh;      // [T][H][N]: per-head dq, summed over heads by the reduce kernel
  float* ws_dkh;      // [T][H][N]
  float* ws_partial;  // [S][H][2N+1]: per-sequence dq_bias, dk_bias and dd partial sums
  int T;
  int S;
  int H;
};

// v1 shared-memory layout, in floats. Rows are padded by one word so that both row-wise and
// column-wise walks by consecutive threads hit distinct banks.
struct M3V1Layout {
  int qr, kr, v, dy, st, ds, m, x, t1, t2, phi, th, dphi, vec, red, total;
};

enum M3V1Vec {
  kVecCl, kVecE, kVecWb, kVecSc, kVecGam, kVecP, kVecDt, kVecQkRaw, kVecRowG, kVecColG,
  kVecU, kVecXs, kVecDyv, kVecDsc, kVecAng, kVecCount
};

static constexpr M3V1Layout m3_v1_layout(int C, int N, int P, int A, int threads) {
  M3V1Layout l{};
  int o = 0;
  l.qr = o; o += C * (N + 1);
  l.kr = o; o += C * (N + 1);
  l.v = o; o += C * (P + 1);
  l.dy = o; o += C * (P + 1);
  l.st = o; o += P * (N + 1);
  l.ds = o; o += P * (N + 1);
  l.m = o; o += C * (C + 1);
  l.x = o; o += C * (C + 1);
  l.t1 = o; o += C * (N + 1);
  l.t2 = o; o += C * (N + 1);
  l.phi = o; o += C * A;
  l.th = o; o += C * A;
  l.dphi = o; o += C * A;
  l.vec = o; o += C * kVecCount + 2 * A + 16;  // per-token vectors, two angle carries, scalars
  l.red = o; o += threads;
  l.total = o;
  return l;
}
