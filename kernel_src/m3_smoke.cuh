// A tiny kernel that the runtime's tests compile and launch: out[i] = a * x[i] + b.
#pragma once

extern "C" __global__ void m3_smoke_axpb(const float* x, float* out, float a, float b, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * x[i] + b;
}
