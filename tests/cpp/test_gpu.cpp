// Needs a CUDA driver and GPU; without them each test warns and passes (Catch2 v2 cannot skip).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
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

namespace {

// The plane-product probes (kernel_src/m3_planes_probe.cuh): a (64 x 32) and b (32 x 128) in their
// stored orientation, full 24-bit mantissas so that the lo planes matter.
struct PlanesProbe {
  const char* name;
  bool a_trans, b_trans;
  bool b_in_bf16;  // kSplitA: B must be exact in bf16
};
constexpr PlanesProbe kPlanesProbes[] = {{"m3_planes_probe_a_b", false, false, false},
                                         {"m3_planes_probe_at_b", true, false, false},
                                         {"m3_planes_probe_a_bt", false, true, false},
                                         {"m3_planes_probe_at_bt", true, true, false},
                                         {"m3_planes_probe_at_bt_one", true, true, true},
                                         {"m3_planes_probe_tf32_at_bt", true, true, false}};
constexpr int kPM = 64, kPN = 128, kPK = 32;

std::vector<float> probe_operand(std::size_t n, unsigned seed, bool in_bf16) {
  std::vector<float> x(n);
  for (float& v : x) {
    seed = seed * 1664525u + 1013904223u;
    v = static_cast<float>(seed >> 8) / 8388608.0f - 1.0f;
    if (in_bf16) {
      unsigned u;
      std::memcpy(&u, &v, 4);
      u &= 0xFFFF0000u;
      std::memcpy(&v, &u, 4);
    }
  }
  return x;
}

// rel-L2 of d (64 x 128) against reps * a b in float64.
double planes_probe_error(const PlanesProbe& pr, const std::vector<float>& a, const std::vector<float>& b,
                          const std::vector<float>& d, int reps) {
  double num = 0, den = 0;
  for (int m = 0; m < kPM; ++m)
    for (int n = 0; n < kPN; ++n) {
      double ref = 0;
      for (int k = 0; k < kPK; ++k) {
        const double av = pr.a_trans ? a[k * kPM + m] : a[m * kPK + k];
        const double bv = pr.b_trans ? b[k * kPN + n] : b[n * kPK + k];
        ref += av * bv;
      }
      ref *= reps;
      num += (d[m * kPN + n] - ref) * (d[m * kPN + n] - ref);
      den += ref * ref;
    }
  return std::sqrt(num / den);
}

// Two CTAs of a probe for each SM, as the backward pairs its jobs.
unsigned two_ctas_per_sm() {
  int sms = 0;
  driver::check(driver::api().cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                                   driver::current_device()),
                "cuDeviceGetAttribute");
  return 2u * static_cast<unsigned>(sms);
}

// The best of five timed launches (host clock around launch and synchronise), in seconds.
double best_launch_seconds(const LoadedKernel& k, const LaunchConfig& cfg, void** args) {
  double best = 1e30;
  for (int trial = 0; trial < 5; ++trial) {
    const auto t0 = std::chrono::steady_clock::now();
    k.launch(cfg, args);
    driver::check(driver::api().cuCtxSynchronize(), "cuCtxSynchronize");
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

TEST_CASE("the plane products match float64 in every operand orientation in bf16 pairs and in half", "[gpu]") {
  if (!have_gpu()) {
    WARN("no GPU: skipped");
    return;
  }
  const auto& api = driver::api();
  use_test_cache_dir();
  driver::ensure_context();  // the allocations below come before any load_kernel
  std::vector<float> d(kPM * kPN);
  CUdeviceptr da = 0, db = 0, dd = 0;
  driver::check(api.cuMemAlloc(&da, kPM * kPK * 4), "cuMemAlloc");
  driver::check(api.cuMemAlloc(&db, kPK * kPN * 4), "cuMemAlloc");
  driver::check(api.cuMemAlloc(&dd, d.size() * 4), "cuMemAlloc");
  for (const bool fp16 : {false, true}) {
    for (const PlanesProbe& pr : kPlanesProbes) {
      const std::vector<float> a = probe_operand(kPM * kPK, 7, false), b = probe_operand(kPK * kPN, 11, pr.b_in_bf16);
      driver::check(api.cuMemcpyHtoD(da, a.data(), a.size() * 4), "cuMemcpyHtoD");
      driver::check(api.cuMemcpyHtoD(db, b.data(), b.size() * 4), "cuMemcpyHtoD");
      const LoadedKernel& k = load_kernel(test::planes_probe_source("sm_90a", fp16), pr.name, test::kPlanesProbeSmem);
      for (int reps : {1, 3}) {
        void* args[] = {&da, &db, &dd, &reps};
        LaunchConfig cfg;
        cfg.block[0] = 256;
        cfg.dynamic_smem = test::kPlanesProbeSmem;
        k.launch(cfg, args);
        driver::check(api.cuCtxSynchronize(), "cuCtxSynchronize");
        driver::check(api.cuMemcpyDtoH(d.data(), dd, d.size() * 4), "cuMemcpyDtoH");
        const double err = planes_probe_error(pr, a, b, d, reps);
        INFO(pr.name << (fp16 ? " (fp16)" : "") << ", reps " << reps << ": rel-L2 " << err);
        const bool tf32 = std::string(pr.name).find("tf32") != std::string::npos;
        // Split planes: 2^-17 per operand and fp32 sums, about 1e-6; one half plane (every mode):
        // 2^-12 per operand, about 3e-4; tf32 truncated: about 1e-3; a wrong fragment layout gives O(1).
        CHECK(err < (tf32 ? 3e-3 : fp16 ? 1e-3 : 2e-5));
      }
    }
  }
  api.cuMemFree(da);
  api.cuMemFree(db);
  api.cuMemFree(dd);
  ::unsetenv("MAMBA3_JIT_CACHE_DIR");
}

// Timing, not a check: run by name on a GPU machine (hidden from the default test run). Two CTAs of
// every probe an SM, as the backward runs; the time of `reps` products less that of none, per
// product and CTA pair.
TEST_CASE("plane products: time per product", "[.][gpu-timing]") {
  if (!have_gpu()) {
    WARN("no GPU: skipped");
    return;
  }
  const auto& api = driver::api();
  use_test_cache_dir();
  driver::ensure_context();  // the allocations below come before any load_kernel
  const unsigned ctas = two_ctas_per_sm();
  CUdeviceptr da = 0, db = 0, dd = 0;
  driver::check(api.cuMemAlloc(&da, kPM * kPK * 4), "cuMemAlloc");
  driver::check(api.cuMemAlloc(&db, kPK * kPN * 4), "cuMemAlloc");
  driver::check(api.cuMemAlloc(&dd, std::size_t{ctas} * kPM * kPN * 4), "cuMemAlloc");
  const std::vector<float> a = probe_operand(kPM * kPK, 7, false), b = probe_operand(kPK * kPN, 11, true);
  driver::check(api.cuMemcpyHtoD(da, a.data(), a.size() * 4), "cuMemcpyHtoD");
  driver::check(api.cuMemcpyHtoD(db, b.data(), b.size() * 4), "cuMemcpyHtoD");
  // Every probe in bf16 pairs, then the transposed one in fp16 (one plane, one m16n8k16 a piece).
  std::vector<std::pair<const char*, bool>> timed;
  for (const PlanesProbe& pr : kPlanesProbes) timed.emplace_back(pr.name, false);
  timed.emplace_back("m3_planes_probe_at_bt", true);
  for (const auto& [name, fp16] : timed) {
    const LoadedKernel& k = load_kernel(test::planes_probe_source("sm_90a", fp16), name, test::kPlanesProbeSmem);
    const auto seconds = [&](int reps) {
      void* args[] = {&da, &db, &dd, &reps};
      LaunchConfig cfg;
      cfg.grid[0] = ctas;
      cfg.block[0] = 256;
      cfg.dynamic_smem = test::kPlanesProbeSmem;
      return best_launch_seconds(k, cfg, args);
    };
    const int reps = 4096;
    const double ns = (seconds(reps) - seconds(0)) / reps * 1e9;
    const double tflops = 2.0 * kPM * kPN * kPK * ctas / (ns * 1e-9) / 1e12;
    WARN(name << (fp16 ? " (fp16)" : "") << ": " << ns << " ns a product per CTA pair (" << tflops
              << " TFLOP/s of fp32-equivalent products)");
  }
  api.cuMemFree(da);
  api.cuMemFree(db);
  api.cuMemFree(dd);
  ::unsetenv("MAMBA3_JIT_CACHE_DIR");
}

namespace {

// The product cores' inputs (kernel_src/m3_planes_core.cuh and m3_planes_core64.cuh, in the
// probes' order) and their outputs computed in float64, for a chunk of C tokens.
constexpr int kCN = 128, kCP = 64;
constexpr int core_out_size(int C) { return 2 * C * kCN + C * kCP + kCP * kCN + 2 * C; }
constexpr unsigned kCoreSmem = 105472;    // m3pl::CoreLayout::total
constexpr unsigned kCore64Smem = 110112;  // m3pl::Core64Layout::total

std::vector<float> core_inputs(int C) {
  std::vector<float> in;
  const auto append = [&](std::size_t n, unsigned seed, bool in_bf16) {
    const std::vector<float> x = probe_operand(n, seed, in_bf16);
    in.insert(in.end(), x.begin(), x.end());
  };
  append(C * kCN, 3, false);     // qr
  append(C * kCN, 5, false);     // ks
  append(C * kCP, 7, false);     // dy
  append(C * kCP, 9, true);      // v
  append(kCP * kCN, 13, false);  // S
  append(kCP * kCN, 17, false);  // dS
  float cl = 0.f;
  for (float a : probe_operand(C, 19, false)) in.push_back(cl -= 0.05f * (a + 1.f));  // decays in (0, 0.1]
  return in;
}

std::vector<double> core_reference(const std::vector<float>& in, int C) {
  const float *qr = in.data(), *ks = qr + C * kCN, *dy = ks + C * kCN, *v = dy + C * kCP, *st = v + C * kCP,
              *ds = st + kCP * kCN, *cl = ds + kCP * kCN;
  std::vector<double> out(core_out_size(C), 0.0);
  double *dqr = out.data(), *dks = dqr + C * kCN, *dv = dks + C * kCN, *upd = dv + C * kCP, *row_g = upd + kCP * kCN,
         *col_g = row_g + C;
  std::vector<double> mw(C * C, 0.0), dmw(C * C, 0.0), e(C), w(C);
  for (int t = 0; t < C; ++t) {
    e[t] = std::exp(static_cast<double>(cl[t]));
    w[t] = std::exp(static_cast<double>(cl[C - 1]) - cl[t]);
  }
  for (int t = 0; t < C; ++t)
    for (int s = 0; s <= t; ++s) {
      double sc = 0, dm = 0;
      for (int n = 0; n < kCN; ++n) sc += static_cast<double>(qr[t * kCN + n]) * ks[s * kCN + n];
      for (int p = 0; p < kCP; ++p) dm += static_cast<double>(dy[t * kCP + p]) * v[s * kCP + p];
      const double wd = std::exp(static_cast<double>(cl[t]) - cl[s]);
      mw[t * C + s] = wd * sc;
      dmw[t * C + s] = wd * dm;
      row_g[t] += dm * mw[t * C + s];
      col_g[s] += dm * mw[t * C + s];
    }
  for (int t = 0; t < C; ++t)
    for (int n = 0; n < kCN; ++n) {
      double intra = 0, inter = 0, kintra = 0, kstate = 0;
      for (int s = 0; s < C; ++s) intra += dmw[t * C + s] * ks[s * kCN + n];
      for (int p = 0; p < kCP; ++p) inter += static_cast<double>(dy[t * kCP + p]) * st[p * kCN + n];
      for (int u = 0; u < C; ++u) kintra += dmw[u * C + t] * qr[u * kCN + n];
      for (int p = 0; p < kCP; ++p) kstate += static_cast<double>(v[t * kCP + p]) * ds[p * kCN + n];
      dqr[t * kCN + n] = intra + e[t] * inter;
      dks[t * kCN + n] = kintra + w[t] * kstate;
    }
  for (int s = 0; s < C; ++s)
    for (int p = 0; p < kCP; ++p) {
      double intra = 0, state = 0;
      for (int t = 0; t < C; ++t) intra += mw[t * C + s] * dy[t * kCP + p];
      for (int n = 0; n < kCN; ++n) state += static_cast<double>(ks[s * kCN + n]) * ds[p * kCN + n];
      dv[s * kCP + p] = intra + w[s] * state;
    }
  for (int p = 0; p < kCP; ++p)
    for (int n = 0; n < kCN; ++n) {
      double acc = 0;
      for (int t = 0; t < C; ++t) acc += e[t] * dy[t * kCP + p] * qr[t * kCN + n];
      upd[p * kCN + n] = acc;
    }
  return out;
}

// The probes of the cores: chunk, format, kernel, shared memory, range guard.
struct CoreProbe {
  int chunk;
  bool fp16;
  const char* name;
  unsigned smem;
  bool scaled = false;
};
constexpr CoreProbe kCoreProbes[] = {{32, false, "m3_planes_core_probe", kCoreSmem},
                                     {32, true, "m3_planes_core_probe", kCoreSmem},
                                     {64, true, "m3_planes_core64_probe", kCore64Smem},
                                     {64, true, "m3_planes_core64_probe", kCore64Smem, true}};

const char* core_format(const CoreProbe& pr) { return pr.scaled ? " (fp16, scaled)" : pr.fp16 ? " (fp16)" : " (bf16 pairs)"; }

// The inputs whose scale is free (v, dy, S, dS) times a power of two (v stays exact in bf16).
void scale_free_inputs(std::vector<float>& in, int C, float factor) {
  const std::size_t cn = std::size_t(C) * kCN, cp = std::size_t(C) * kCP, pn = std::size_t(kCP) * kCN;
  for (std::size_t i = 2 * cn; i < 2 * cn + 2 * cp + 2 * pn; ++i) in[i] *= factor;
}

}  // namespace

TEST_CASE("the plane product cores match float64 on every output: bf16 pairs and fp16 at chunks 32 and 64", "[gpu]") {
  if (!have_gpu()) {
    WARN("no GPU: skipped");
    return;
  }
  const auto& api = driver::api();
  use_test_cache_dir();
  driver::ensure_context();  // the allocations below come before any load_kernel
  // Each core at the generator's scale; the chunk-64 half cores also with v, dy, S and dS 2^16 times
  // larger, where the guarded one must stay as exact and the plain one must overflow (half's 65504).
  struct Run {
    const CoreProbe& pr;
    float input_scale;
    bool must_pass;
  };
  const Run runs[] = {{kCoreProbes[0], 1.f, true},     {kCoreProbes[1], 1.f, true},
                      {kCoreProbes[2], 1.f, true},     {kCoreProbes[3], 1.f, true},
                      {kCoreProbes[2], 65536.f, false}, {kCoreProbes[3], 65536.f, true}};
  for (const auto& [pr, input_scale, must_pass] : runs) {
    const int C = pr.chunk;
    std::vector<float> in = core_inputs(C);
    scale_free_inputs(in, C, input_scale);
    const std::vector<double> ref = core_reference(in, C);
    std::vector<float> out(core_out_size(C), std::numeric_limits<float>::quiet_NaN());  // NaN unless written
    CUdeviceptr din = 0, dout = 0;
    driver::check(api.cuMemAlloc(&din, in.size() * 4), "cuMemAlloc");
    driver::check(api.cuMemAlloc(&dout, out.size() * 4), "cuMemAlloc");
    driver::check(api.cuMemcpyHtoD(din, in.data(), in.size() * 4), "cuMemcpyHtoD");
    driver::check(api.cuMemcpyHtoD(dout, out.data(), out.size() * 4), "cuMemcpyHtoD");
    const LoadedKernel& k =
        load_kernel(test::planes_probe_source("sm_90a", pr.fp16, 0, pr.scaled), pr.name, pr.smem);
    int reps = 2;  // the second repetition restages over the first's planes
    int products_only = 0;
    void* args[] = {&din, &dout, &reps, &products_only};
    LaunchConfig cfg;
    cfg.block[0] = 256;
    cfg.dynamic_smem = pr.smem;
    k.launch(cfg, args);
    driver::check(api.cuCtxSynchronize(), "cuCtxSynchronize");
    driver::check(api.cuMemcpyDtoH(out.data(), dout, out.size() * 4), "cuMemcpyDtoH");
    api.cuMemFree(din);
    api.cuMemFree(dout);
    // Bounds. bf16 pairs: dv keeps one plane of dy and of dS (about 2^-9 / sqrt(3) an element,
    // averaged over its sums); every other output has both planes of each rounded operand (about
    // 2^-16). fp16: one plane everywhere, 2^-12 an element as tf32 rounded to nearest, a few 1e-4
    // on a product. A wrong fragment or plane gives O(1), a bf16 lo plane left out about 1e-3.
    struct Part {
      const char* name;
      int n;
      double bound;
    };
    const double tight = pr.fp16 ? 1e-3 : 1e-4, loose = pr.fp16 ? 1e-3 : 1e-2;
    const Part parts[] = {{"dqr", C * kCN, tight}, {"dks", C * kCN, tight}, {"dv", C * kCP, loose},
                          {"upd", kCP * kCN, tight}, {"row_g", C, tight},     {"col_g", C, tight}};
    int at = 0;
    bool all_within = true;
    for (const auto& [name, n, bound] : parts) {
      double num = 0, den = 0;
      for (int i = at; i < at + n; ++i) {
        num += (out[i] - ref[i]) * (out[i] - ref[i]);
        den += ref[i] * ref[i];
      }
      at += n;
      const double err = std::sqrt(num / den);
      INFO(pr.name << core_format(pr) << ", inputs x" << input_scale << ", " << name << ": rel-L2 " << err);
      if (must_pass) CHECK(err < bound);  // NaN fails too
      all_within = all_within && err < bound;
    }
    if (!must_pass) {
      INFO(pr.name << core_format(pr) << ", inputs x" << input_scale << ": plain half must overflow somewhere");
      CHECK_FALSE(all_within);
    }
  }
  ::unsetenv("MAMBA3_JIT_CACHE_DIR");
}

// Microseconds a job of a core probe takes with two CTAs an SM: the time of 512 repetitions less
// that of none, per repetition.
double core_job_us(const CoreProbe& pr, int ablate, int products_only) {
  const auto& api = driver::api();
  const unsigned ctas = two_ctas_per_sm();
  const std::vector<float> in = core_inputs(pr.chunk);
  CUdeviceptr din = 0, dout = 0;
  driver::check(api.cuMemAlloc(&din, in.size() * 4), "cuMemAlloc");
  driver::check(api.cuMemAlloc(&dout, std::size_t{ctas} * core_out_size(pr.chunk) * 4), "cuMemAlloc");
  driver::check(api.cuMemcpyHtoD(din, in.data(), in.size() * 4), "cuMemcpyHtoD");
  const LoadedKernel& k = load_kernel(test::planes_probe_source("sm_90a", pr.fp16, ablate, pr.scaled), pr.name, pr.smem);
  const auto seconds = [&](int reps) {
    void* args[] = {&din, &dout, &reps, &products_only};
    LaunchConfig cfg;
    cfg.grid[0] = ctas;
    cfg.block[0] = 256;
    cfg.dynamic_smem = pr.smem;
    return best_launch_seconds(k, cfg, args);
  };
  const int reps = 512;
  const double us = (seconds(reps) - seconds(0)) / reps * 1e6;
  api.cuMemFree(din);
  api.cuMemFree(dout);
  return us;
}

TEST_CASE("plane product core: time per job", "[.][gpu-timing]") {
  if (!have_gpu()) {
    WARN("no GPU: skipped");
    return;
  }
  use_test_cache_dir();
  driver::ensure_context();  // the allocations below come before any load_kernel
  for (const CoreProbe& pr : kCoreProbes)
    for (int products_only : {0, 1})
      WARN(pr.name << core_format(pr) << ": " << core_job_us(pr, 0, products_only)
                   << " us a job of " << pr.chunk << " tokens ("
                   << (products_only ? "products and their stores, staged once" : "staging from L2, products, outputs")
                   << ") with two jobs an SM");
  ::unsetenv("MAMBA3_JIT_CACHE_DIR");
}

TEST_CASE("plane product core: where the products' time goes", "[.][gpu-timing]") {
  if (!have_gpu()) {
    WARN("no GPU: skipped");
    return;
  }
  use_test_cache_dir();
  driver::ensure_context();
  const char* what[] = {"as built", "outputs not stored", "no mixing", "", "mixing alone"};
  for (const CoreProbe& pr : {kCoreProbes[0], kCoreProbes[2]})
    for (int ablate : {0, 1, 2, 4})
      WARN(pr.name << core_format(pr) << ", products staged once, " << what[ablate] << ": "
                   << core_job_us(pr, ablate, 1) << " us a job of " << pr.chunk << " tokens");
  ::unsetenv("MAMBA3_JIT_CACHE_DIR");
}
