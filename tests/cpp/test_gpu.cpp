// Needs a CUDA driver and GPU; without them each test warns and passes (Catch2 v2 cannot skip).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "driver_api.h"
#include "jit.h"
#include "test_util.h"

using namespace mamba3_jit;

namespace {

bool have_gpu() {
  if (driver::available()) {
    int count = 0;
    if (driver::api().cuDeviceGetCount(&count) == CUDA_SUCCESS && count > 0) return true;
  }
  return false;
}

KernelSource smoke() {
  KernelSource s;
  s.name = "smoke";
  s.code = "#include \"m3_smoke.cuh\"\n";
  return s;  // arch left empty: the device's own
}

int compute_capability_major() {
  int major = 0;
  driver::check(driver::api().cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                                   driver::current_device()),
                "cuDeviceGetAttribute");
  return major;
}

// The runtime reads MAMBA3_JIT_CACHE_DIR once per process, so every GPU test shares one directory
// that lives until exit (a directory per test would be gone when the second test compiles).
void use_test_cache_dir() {
  static test::TempDir dir;
  ::setenv("MAMBA3_JIT_CACHE_DIR", dir.path().c_str(), 1);
}

}  // namespace

TEST_CASE("without a driver, GPU entry points fail clearly", "[gpu]") {
  if (driver::available()) return;
  CHECK_FALSE(kernel_is_ready(smoke(), "m3_smoke_axpb"));
  CHECK(driver::current_context() == nullptr);
  try {
    load_kernel(smoke(), "m3_smoke_axpb", 0);
    FAIL("load_kernel worked without a driver");
  } catch (const DriverError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK((what.find("libcuda.so.1") != std::string::npos || what.find("cuInit") != std::string::npos));
  }
}

TEST_CASE("the smoke kernel runs through load_kernel", "[gpu]") {
  if (!have_gpu()) {
    WARN("no GPU: skipped");
    return;
  }
  use_test_cache_dir();
  const auto& api = driver::api();
  const KernelSource src = smoke();
  CHECK_FALSE(kernel_is_ready(src, "m3_smoke_axpb"));
  const LoadedKernel& k = load_kernel(src, "m3_smoke_axpb", 0);
  CHECK(kernel_is_ready(src, "m3_smoke_axpb"));
  CHECK(&load_kernel(src, "m3_smoke_axpb", 0) == &k);
  // More than the default 48 KiB: sets the function attribute.
  CHECK(&load_kernel(src, "m3_smoke_axpb", 96 * 1024) == &k);
  INFO("default_arch() = " << default_arch());
  CHECK(default_arch().rfind("sm_", 0) == 0);

  const int n = 1000;
  std::vector<float> x(n), y(n, -1.0f);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(i);
  CUdeviceptr dx = 0, dy = 0;
  driver::check(api.cuMemAlloc(&dx, n * sizeof(float)), "cuMemAlloc");
  driver::check(api.cuMemAlloc(&dy, n * sizeof(float)), "cuMemAlloc");
  driver::check(api.cuMemcpyHtoD(dx, x.data(), n * sizeof(float)), "cuMemcpyHtoD");
  float a = 2.0f, b = 0.5f;
  int count = n;
  void* args[] = {&dx, &dy, &a, &b, &count};
  CHECK_FALSE(driver::stream_is_capturing(nullptr));

  LaunchConfig cfg;
  cfg.grid[0] = (n + 127) / 128;
  cfg.block[0] = 128;
  k.launch(cfg, args);
  driver::check(api.cuCtxSynchronize(), "cuCtxSynchronize");
  driver::check(api.cuMemcpyDtoH(y.data(), dy, n * sizeof(float)), "cuMemcpyDtoH");
  for (int i = 0; i < n; ++i) REQUIRE(y[i] == 2.0f * static_cast<float>(i) + 0.5f);

  // The same launch in clusters of two blocks (Hopper and later).
  if (compute_capability_major() >= 9) {
    b = 1.5f;
    cfg.grid[0] = 8;
    cfg.cluster[0] = 2;
    k.launch(cfg, args);
    driver::check(api.cuCtxSynchronize(), "cuCtxSynchronize");
    driver::check(api.cuMemcpyDtoH(y.data(), dy, n * sizeof(float)), "cuMemcpyDtoH");
    for (int i = 0; i < n; ++i) REQUIRE(y[i] == 2.0f * static_cast<float>(i) + 1.5f);
  }

  // A launch the device refuses names the kernel.
  LaunchConfig bad;
  bad.block[0] = 4096;
  try {
    k.launch(bad, args);
    FAIL("a 4096-thread block launched");
  } catch (const DriverError& e) {
    CHECK(std::string(e.what()).find("m3_smoke_axpb") != std::string::npos);
  }
  api.cuMemFree(dx);
  api.cuMemFree(dy);

  CHECK_THROWS_AS(load_kernel(src, "no_such_function", 0), DriverError);
  ::unsetenv("MAMBA3_JIT_CACHE_DIR");
}

TEST_CASE("the wgmma tile products match the products of the tf32-truncated operands", "[gpu]") {
  if (!have_gpu()) {
    WARN("no GPU: skipped");
    return;
  }
  const auto& api = driver::api();
  if (const int major = compute_capability_major(); major != 9) {
    WARN("wgmma needs sm_90a: skipped on compute capability " << major);
    return;
  }
  use_test_cache_dir();
  const int K = 128;
  std::vector<float> a(64 * K), b(128 * K), d(64 * 128);
  unsigned seed = 2026;
  for (auto* m : {&a, &b})
    for (float& x : *m) {
      seed = seed * 1664525u + 1013904223u;
      x = static_cast<float>((seed >> 8) & 0xFFFF) / 32768.0f - 1.0f;  // low mantissa bits set
    }
  const auto tf32 = [](float x) {
    unsigned u;
    std::memcpy(&u, &x, 4);
    u &= 0xFFFFE000u;  // the tensor core reads the top 19 bits
    std::memcpy(&x, &u, 4);
    return static_cast<double>(x);
  };
  CUdeviceptr da = 0, db = 0, dd = 0;
  driver::check(api.cuMemAlloc(&da, a.size() * 4), "cuMemAlloc");
  driver::check(api.cuMemAlloc(&db, b.size() * 4), "cuMemAlloc");
  driver::check(api.cuMemAlloc(&dd, d.size() * 4), "cuMemAlloc");
  driver::check(api.cuMemcpyHtoD(da, a.data(), a.size() * 4), "cuMemcpyHtoD");
  driver::check(api.cuMemcpyHtoD(db, b.data(), b.size() * 4), "cuMemcpyHtoD");
  const std::pair<const char*, int> probes[] = {
      {"m3_wgmma_probe_tf32", 64}, {"m3_wgmma_probe_tf32_n128", 128}, {"m3_wgmma_probe_tf32_rs", 64}};
  for (const auto& [name, cols] : probes) {
    const LoadedKernel& k = load_kernel(test::wgmma_probe_source(), name, test::wgmma_probe_smem(cols));
    for (int reps : {1, 3}) {
      void* args[] = {&da, &db, &dd, &reps};
      LaunchConfig cfg;
      cfg.block[0] = 128;
      cfg.dynamic_smem = test::wgmma_probe_smem(cols);
      k.launch(cfg, args);
      driver::check(api.cuCtxSynchronize(), "cuCtxSynchronize");
      driver::check(api.cuMemcpyDtoH(d.data(), dd, 64 * cols * 4), "cuMemcpyDtoH");
      double num = 0, den = 0;
      for (int r = 0; r < 64; ++r)
        for (int c = 0; c < cols; ++c) {
          double ref = 0;
          for (int kk = 0; kk < K; ++kk) ref += tf32(a[r * K + kk]) * tf32(b[c * K + kk]);
          ref *= reps;
          num += (d[r * cols + c] - ref) * (d[r * cols + c] - ref);
          den += ref * ref;
        }
      INFO(name << ", reps " << reps << ": rel-L2 " << std::sqrt(num / den));
      // fp32 accumulation of exact tf32 products: about 1e-7; a wrong layout or descriptor gives O(1).
      CHECK(std::sqrt(num / den) < 1e-6);
    }
  }
  api.cuMemFree(da);
  api.cuMemFree(db);
  api.cuMemFree(dd);
  ::unsetenv("MAMBA3_JIT_CACHE_DIR");
}
