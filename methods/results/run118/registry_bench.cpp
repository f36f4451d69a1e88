// What a call asks the kernel registry before its first launch, timed on the CPU (no GPU needed).
// Build: g++ -O2 -std=c++17 -I runtime methods/results/run118/registry_bench.cpp \
//   $BUILD/libmamba3_jit_runtime.a -lspdlog -lfmt -ldl -lpthread -o /tmp/registry_bench
#include <chrono>
#include <cstdio>
#include "kernel_registry.h"
using namespace mamba3_jit;
int main() {
  OpConfig c = parse_op_config("variant=v166,chunk=32,threads=256");
  volatile long sink = 0;
  const int n = 200000;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    // about what one call asks before its first launch
    sink += picks_by_forward64_waves(c);
    OpConfig w = resolve_kernels(c, 0);
    sink += to_string(w).size();
    OpConfig s = resolve_kernels(c, 0, 3.0);
    sink += is_chunk_parallel(s) + uses_forward64(s) + stores_mixing(s);
    OpConfig l = resolve_kernels(c, 470);
    sink += is_chunk_parallel(l) + uses_forward64(l) + stores_mixing(l);
    OpConfig r = resolve_kernels(c, 191, 3.0);
    sink += is_chunk_parallel(r) + to_string(r).size() + angle_cluster_size(r, 191) + uses_programmatic_launch(r) +
            head_cluster_size(r, 32) + overlaps_backward(r) + uses_wide_reductions(r) + overlaps_reduce(r);
  }
  auto t1 = std::chrono::steady_clock::now();
  std::printf("per call %.3f us\n", std::chrono::duration<double, std::micro>(t1 - t0).count() / n);
  int n2 = 1000000; t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n2; ++i) sink += is_chunk_parallel(c);
  t1 = std::chrono::steady_clock::now();
  std::printf("is_chunk_parallel(v166) %.3f us\n", std::chrono::duration<double, std::micro>(t1 - t0).count() / n2);
  OpConfig k = resolve_kernels(c, 0);
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n2; ++i) sink += uses_forward64(k);
  t1 = std::chrono::steady_clock::now();
  std::printf("uses_forward64(v164) %.3f us\n", std::chrono::duration<double, std::micro>(t1 - t0).count() / n2);
}
