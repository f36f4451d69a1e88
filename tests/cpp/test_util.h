// Helpers shared by the runtime tests.
#pragma once

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "jit.h"

namespace mamba3_jit::test {

// A fresh directory under $TMPDIR, removed with its contents at scope exit.
class TempDir {
 public:
  TempDir() {
    const char* t = std::getenv("TMPDIR");
    std::string templ = std::string(t && *t ? t : "/tmp") + "/mamba3-jit-test-XXXXXX";
    path_ = ::mkdtemp(templ.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// The wgmma building blocks' device check (kernel_src/m3_wgmma_probe.cuh): d = reps * a b^T for
// a 64 x 128 and b Cols x 128, one warpgroup, the operand tiles plus 1 KB of alignment.
constexpr unsigned wgmma_probe_smem(int cols) { return (64 + cols) * 128 * 4 + 1024; }
inline KernelSource wgmma_probe_source(const std::string& arch = "sm_90a") {
  KernelSource s;
  s.name = "wgmma_probe";
  s.code = "#include \"m3_wgmma_probe.cuh\"\n";
  s.arch = arch;
  return s;
}

// The bf16-plane products' device check and timing (kernel_src/m3_planes_probe.cuh): d = reps * a b
// for a 64 x 32 and b 32 x 128, 256 threads, under 48 KB of shared memory.
constexpr unsigned kPlanesProbeSmem = 32 * 1024;
// fp16: the planes in IEEE half, one plane an operand (M3_PLANES_FP16); ablate: the cores' timing
// ablations (M3_CORE_ABLATE, results wrong); scaled: the chunk-64 core's range guard
// (M3_CORE64_SCALED: a power-of-two scale a tile).
inline KernelSource planes_probe_source(const std::string& arch = "sm_90a", bool fp16 = false, int ablate = 0,
                                        bool scaled = false) {
  KernelSource s;
  s.name = std::string(fp16 ? "planes_probe_fp16" : "planes_probe") + (ablate ? "_ablate" + std::to_string(ablate) : "") +
           (scaled ? "_scaled" : "");
  s.code = "#include \"m3_planes_probe.cuh\"\n";
  s.options = {"-DM3_LEAN_MMA=1", "-DM3_TF32_TRUNCATE=1"};  // the default kernels' tf32 operands
  if (fp16) s.options.push_back("-DM3_PLANES_FP16=1");
  if (ablate) s.options.push_back("-DM3_CORE_ABLATE=" + std::to_string(ablate));
  if (scaled) s.options.push_back("-DM3_CORE64_SCALED=1");
  s.arch = arch;
  return s;
}

// The smoke kernel made unique by a tag, so that every test starts from its own key. It compiles
// in a fraction of a second.
inline KernelSource smoke_source(const std::string& tag, const std::string& arch = "sm_90a") {
  KernelSource s;
  s.name = "smoke[" + tag + "]";
  s.code = "#include \"m3_smoke.cuh\"\n";
  s.options = {"-DM3_TEST_TAG_" + tag + "=1"};
  s.arch = arch;
  return s;
}

// Files in `dir` (not recursive) whose name starts with `prefix`.
inline std::vector<std::string> files_with_prefix(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0) out.push_back(name);
  }
  return out;
}

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout and stderr together
};

inline CommandResult run_command(const std::string& command, const std::string& scratch_dir) {
  const std::string out_path = scratch_dir + "/command-output.txt";
  const int status = std::system((command + " >" + out_path + " 2>&1").c_str());
  CommandResult r;
  r.exit_code = (status != -1 && WIFEXITED(status)) ? WEXITSTATUS(status) : -1;
  r.out = read_text(out_path);
  std::remove(out_path.c_str());
  return r;
}

inline std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  const auto nl = t.find_last_of('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

}  // namespace mamba3_jit::test
