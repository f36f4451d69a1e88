// Every kernel specialisation the dispatcher can request. The warm-up tool and the tests walk
// this list; the dispatcher builds its sources through the same functions, so the two can never
// disagree.
#pragma once

#include <string>
#include <vector>

#include "jit.h"

namespace mamba3_jit {

// All specialisations for `arch` (empty = default_arch()).
std::vector<KernelSource> all_specializations(const std::string& arch = "");

}  // namespace mamba3_jit
