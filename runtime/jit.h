// Public interface of the JIT runtime: NVRTC compile, on-disk cache, driver-API load and launch.
// Everything here works without a GPU except load_kernel()/LoadedKernel::launch(), which open the
// CUDA driver lazily on first use.
#pragma once

#include <cuda.h>  // driver API types only; the driver library itself is dlopen'ed

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace mamba3_jit {

// One kernel specialisation: a generated translation unit plus the NVRTC options that specialise
// it. `code` may #include any header of kernel_src/ by its file name; those headers are embedded
// in the library at build time and handed to NVRTC in memory.
struct KernelSource {
  std::string name;                  // for logs and errors, e.g. "fwd_bwd_v1[C=32,S=4]"
  std::string code;                  // the translation unit
  std::vector<std::string> options;  // extra NVRTC options, e.g. "-DM3_CHUNK=32"; part of the key
  std::string arch;                  // "sm_90a", "sm_80", ...; empty means default_arch()
};

// sm_90a on a Hopper device, the current device's own "sm_XY" elsewhere, and sm_90a when no
// driver or GPU is present (offline warm-up, CI).
std::string default_arch();

class JitError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// NVRTC failure. what() holds the log, the options, a numbered excerpt around every error line
// and the path of a file that holds the whole failing source.
class NvrtcError : public JitError {
 public:
  NvrtcError(const std::string& what, std::string log, std::string source_path)
      : JitError(what), log_(std::move(log)), source_path_(std::move(source_path)) {}
  const std::string& log() const { return log_; }
  const std::string& source_path() const { return source_path_; }

 private:
  std::string log_;
  std::string source_path_;
};

// A failing CUDA driver call; what() names the call and the CUresult's name and text.
class DriverError : public JitError {
 public:
  using JitError::JitError;
};

struct CompileOutput {
  std::string cubin;
  std::string log;
  std::vector<std::string> options;  // the full option list NVRTC saw
  double seconds = 0.0;
};

// Compiles with NVRTC, no cache involved. Throws NvrtcError.
CompileOutput compile_with_nvrtc(const KernelSource& src);

enum class CacheOutcome { kMemoryHit, kDiskHit, kCompiled, kRecompiledCorrupt };
const char* to_string(CacheOutcome outcome);

struct CacheResult {
  std::string key;                            // hex sha256
  std::shared_ptr<const std::string> cubin;
  CacheOutcome outcome;
};

// Checksummed on-disk cache with a thread-safe in-memory layer in front (one compile per key).
class KernelCache {
 public:
  // An empty dir means memory only. A dir that cannot be written falls back to memory and
  // warns once.
  explicit KernelCache(std::string dir);
  ~KernelCache();
  KernelCache(const KernelCache&) = delete;
  KernelCache& operator=(const KernelCache&) = delete;

  // MAMBA3_JIT_CACHE_DIR, else $XDG_CACHE_HOME/mamba3-jit, else ~/.cache/mamba3-jit.
  static std::string default_dir();
  // The process-wide cache on default_dir().
  static KernelCache& global();

  std::string key(const KernelSource& src) const;
  CacheResult get_or_compile(const KernelSource& src);
  // True when the binary is in memory or a valid entry is on disk: no compile would be needed.
  bool contains(const KernelSource& src) const;
  const std::string& dir() const;
  // False when entries are kept in memory only (empty dir, or a directory that was unusable).
  bool persistent() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct LaunchConfig {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned dynamic_smem = 0;
  CUstream stream = nullptr;
  unsigned cluster[3] = {1, 1, 1};  // {1,1,1} means no cluster attribute
  // Programmatic stream serialization: the kernel may start before the previous one on the stream
  // has finished, and must wait for it itself (griddepcontrol.wait) before reading its results.
  bool programmatic = false;
};

// A function loaded into one CUDA context.
class LoadedKernel {
 public:
  LoadedKernel(CUfunction fn, std::string name) : fn_(fn), name_(std::move(name)) {}
  // cuLaunchKernelEx; throws DriverError naming the kernel.
  void launch(const LaunchConfig& cfg, void** args) const;
  CUfunction function() const { return fn_; }
  const std::string& name() const { return name_; }
  // How many CTAs of `threads` threads and `dynamic_smem` bytes fit on the current device at once
  // (occupancy per SM times the SMs); throws DriverError, or std::runtime_error when none fits.
  unsigned resident_ctas(unsigned threads, unsigned dynamic_smem) const;
  // At debug level, logs how many such CTAs fit on one SM and what limits them (registers per
  // thread, local memory, shared memory): the occupancy a variant was built for, checked on the
  // device. Silent and free at other levels; never throws.
  void log_occupancy(unsigned threads, unsigned dynamic_smem) const;

 private:
  CUfunction fn_;
  std::string name_;
};

// Compile-or-fetch through KernelCache::global(), load into the calling thread's current context
// (the device's primary context is retained and made current when none is), look up the
// extern "C" function, and set its max-dynamic-shared-memory attribute once. Memoized per
// (key, function, context): later calls only take a lock and a map lookup.
const LoadedKernel& load_kernel(const KernelSource& src, const std::string& function_name,
                                unsigned max_dynamic_smem);

// True when load_kernel() for this (source, function) in the current context needs no compile
// and no module load. Used to refuse JIT work inside CUDA graph capture.
bool kernel_is_ready(const KernelSource& src, const std::string& function_name);

}  // namespace mamba3_jit
