#include "kernel_registry.h"

namespace mamba3_jit {

// Placeholder until the operator kernels land: only the smoke kernel.
std::vector<KernelSource> all_specializations(const std::string& arch) {
  KernelSource smoke;
  smoke.name = "smoke";
  smoke.code = "#include \"m3_smoke.cuh\"\n";
  smoke.arch = arch;
  return {smoke};
}

}  // namespace mamba3_jit
