// default_arch(), load_kernel(), kernel_is_ready() and LoadedKernel::launch(): the part of the
// runtime that needs the CUDA driver.
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "driver_api.h"
#include "jit.h"
#include "logging.h"
#include "nvrtc_compiler.h"

namespace mamba3_jit {
namespace {

constexpr const char* kOfflineArch = "sm_90a";
constexpr unsigned kDefaultSmemLimit = 48 * 1024;

std::string arch_for_device(CUdevice dev) {
  const auto& api = driver::api();
  int major = 0, minor = 0;
  driver::check(api.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
                "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)");
  driver::check(api.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
                "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)");
  // The kernels use Hopper-only instructions (wgmma, TMA), which need the "a" target.
  if (major == 9 && minor == 0) return "sm_90a";
  return "sm_" + std::to_string(major) + std::to_string(minor);
}

// The memo key. Lookups compare the caller's strings in place (MemoView), so a hit copies
// nothing; the cheap fields come first.
struct MemoKey {
  CUcontext ctx;
  std::string function;
  std::string arch;
  std::vector<std::string> options;
  std::string code;
};
struct MemoView {
  CUcontext ctx;
  const std::string& function;
  const std::string& arch;
  const std::vector<std::string>& options;
  const std::string& code;
};
template <typename K>
auto memo_tie(const K& k) {
  return std::tie(k.ctx, k.function, k.arch, k.options, k.code);
}
struct MemoLess {
  using is_transparent = void;
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    return memo_tie(a) < memo_tie(b);
  }
};

struct Loaded {
  LoadedKernel kernel;
  unsigned smem_limit;  // the max-dynamic-shared-memory attribute set on the function so far
};

struct Registry {
  std::mutex mu;
  std::map<MemoKey, std::unique_ptr<Loaded>, MemoLess> kernels;
  std::map<std::pair<std::string, CUcontext>, CUmodule> modules;  // by cache key
};

Registry& registry() {
  // Never destroyed: the references handed out must outlive every caller, static ones included.
  static Registry* r = new Registry;
  return *r;
}

// Raises the function's dynamic shared memory limit when asked for more than the default 48 KiB
// and more than was set before. Called with the registry lock held.
void raise_smem_limit(Loaded* entry, unsigned max_dynamic_smem) {
  if (max_dynamic_smem <= kDefaultSmemLimit || max_dynamic_smem <= entry->smem_limit) return;
  driver::check(driver::api().cuFuncSetAttribute(entry->kernel.function(),
                                                 CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                 static_cast<int>(max_dynamic_smem)),
                "cuFuncSetAttribute(" + entry->kernel.name() +
                    ", MAX_DYNAMIC_SHARED_SIZE_BYTES=" + std::to_string(max_dynamic_smem) + ")");
  entry->smem_limit = max_dynamic_smem;
}

}  // namespace

std::string default_arch() {
  if (!driver::available()) return kOfflineArch;
  try {
    const CUdevice dev = driver::current_device();
    static std::mutex mu;
    static auto* by_device = new std::map<CUdevice, std::string>;
    std::lock_guard<std::mutex> lock(mu);
    auto it = by_device->find(dev);
    if (it == by_device->end()) it = by_device->emplace(dev, arch_for_device(dev)).first;
    return it->second;
  } catch (const DriverError& e) {
    logger().warn("cannot query the GPU's architecture ({}); compiling for {}", e.what(),
                  kOfflineArch);
    return kOfflineArch;
  }
}

void LoadedKernel::launch(const LaunchConfig& cfg, void** args) const {
  CUlaunchConfig config{};
  config.gridDimX = cfg.grid[0];
  config.gridDimY = cfg.grid[1];
  config.gridDimZ = cfg.grid[2];
  config.blockDimX = cfg.block[0];
  config.blockDimY = cfg.block[1];
  config.blockDimZ = cfg.block[2];
  config.sharedMemBytes = cfg.dynamic_smem;
  config.hStream = cfg.stream;
  CUlaunchAttribute attrs[2]{};
  unsigned n_attrs = 0;
  if (cfg.cluster[0] != 1 || cfg.cluster[1] != 1 || cfg.cluster[2] != 1) {
    CUlaunchAttribute& a = attrs[n_attrs++];
    a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    a.value.clusterDim.x = cfg.cluster[0];
    a.value.clusterDim.y = cfg.cluster[1];
    a.value.clusterDim.z = cfg.cluster[2];
  }
  if (cfg.programmatic) {
    CUlaunchAttribute& a = attrs[n_attrs++];
    a.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    a.value.programmaticStreamSerializationAllowed = 1;
  }
  config.attrs = n_attrs > 0 ? attrs : nullptr;
  config.numAttrs = n_attrs;
  const CUresult r = driver::api().cuLaunchKernelEx(&config, fn_, args, nullptr);
  if (r != CUDA_SUCCESS) {
    const auto dims = [](const unsigned* d) {
      return "(" + std::to_string(d[0]) + "," + std::to_string(d[1]) + "," + std::to_string(d[2]) +
             ")";
    };
    driver::check(r, "cuLaunchKernelEx(" + name_ + ", grid " + dims(cfg.grid) + ", block " +
                         dims(cfg.block) + ", cluster " + dims(cfg.cluster) + ", dynamic smem " +
                         std::to_string(cfg.dynamic_smem) + (cfg.programmatic ? ", programmatic" : "") + ")");
  }
}

unsigned LoadedKernel::resident_ctas(unsigned threads, unsigned dynamic_smem) const {
  const auto& api = driver::api();
  int per_sm = 0, sms = 0;
  driver::check(api.cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn_, static_cast<int>(threads), dynamic_smem),
                "cuOccupancyMaxActiveBlocksPerMultiprocessor(" + name_ + ", " + std::to_string(threads) +
                    " threads, dynamic smem " + std::to_string(dynamic_smem) + ")");
  driver::check(api.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, driver::current_device()),
                "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
  if (per_sm <= 0 || sms <= 0) {
    throw std::runtime_error("mamba3_jit: no CTA of " + name_ + " (" + std::to_string(threads) +
                             " threads, dynamic smem " + std::to_string(dynamic_smem) + ") fits on an SM");
  }
  return static_cast<unsigned>(per_sm) * static_cast<unsigned>(sms);
}

void LoadedKernel::log_occupancy(unsigned threads, unsigned dynamic_smem) const {
  if (!logger().should_log(spdlog::level::debug)) return;
  int per_sm = 0, regs = 0, local = 0, static_smem = 0;
  CUresult failed = CUDA_SUCCESS;
  try {
    const auto& api = driver::api();
    const CUresult r[] = {
        api.cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn_, static_cast<int>(threads), dynamic_smem),
        api.cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn_),
        api.cuFuncGetAttribute(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn_),
        api.cuFuncGetAttribute(&static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn_)};
    for (const CUresult e : r) {
      if (e != CUDA_SUCCESS && failed == CUDA_SUCCESS) failed = e;
    }
  } catch (const std::exception& e) {
    logger().debug("{}: occupancy not available ({})", name_, e.what());
    return;
  }
  if (failed != CUDA_SUCCESS) {
    logger().debug("{}: occupancy not available ({})", name_, driver::error_string(failed));
    return;
  }
  logger().debug("{}: {} CTAs of {} threads per SM ({} registers per thread, {} bytes of local memory, "
                 "{} + {} bytes of shared memory per CTA)",
                 name_, per_sm, threads, regs, local, static_smem, dynamic_smem);
}

const LoadedKernel& load_kernel(const KernelSource& src, const std::string& function_name,
                                unsigned max_dynamic_smem) {
  const CUcontext ctx = driver::ensure_context();
  Registry& reg = registry();
  const MemoView view{ctx, function_name, src.arch, src.options, src.code};
  {
    std::lock_guard<std::mutex> lock(reg.mu);
    auto it = reg.kernels.find(view);
    if (it != reg.kernels.end()) {
      raise_smem_limit(it->second.get(), max_dynamic_smem);
      return it->second->kernel;
    }
  }

  // Compiling can take seconds; it happens outside the lock (the cache has its own
  // one-compile-per-key guarantee).
  KernelSource resolved = src;
  resolved.arch = resolve_arch(src.arch);
  const CacheResult built = KernelCache::global().get_or_compile(resolved);
  const std::string display =
      src.name.empty() || src.name == function_name ? function_name
                                                    : function_name + " [" + src.name + "]";

  std::lock_guard<std::mutex> lock(reg.mu);
  auto it = reg.kernels.find(view);
  if (it == reg.kernels.end()) {
    const auto& api = driver::api();
    CUmodule& module = reg.modules[{built.key, ctx}];
    if (!module) {
      driver::check(api.cuModuleLoadData(&module, built.cubin->data()),
                    "cuModuleLoadData(" + display + ", key " + built.key.substr(0, 16) + ")");
    }
    CUfunction fn = nullptr;
    driver::check(api.cuModuleGetFunction(&fn, module, function_name.c_str()),
                  "cuModuleGetFunction(" + display + ")");
    auto entry = std::make_unique<Loaded>(Loaded{LoadedKernel(fn, display), 0});
    it = reg.kernels
             .emplace(MemoKey{ctx, function_name, src.arch, src.options, src.code}, std::move(entry))
             .first;
    logger().debug("loaded {} ({}) into context {}", display, to_string(built.outcome),
                   static_cast<const void*>(ctx));
  }
  raise_smem_limit(it->second.get(), max_dynamic_smem);
  return it->second->kernel;
}

bool kernel_is_ready(const KernelSource& src, const std::string& function_name) {
  const CUcontext ctx = driver::current_context();
  if (!ctx) return false;
  Registry& reg = registry();
  const MemoView view{ctx, function_name, src.arch, src.options, src.code};
  std::lock_guard<std::mutex> lock(reg.mu);
  return reg.kernels.count(view) > 0;
}

}  // namespace mamba3_jit
