// The kernel_src/ headers, embedded at build time (cmake/embed_headers.cmake).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace mamba3_jit {

// (file name, contents) of every kernel_src/*.cuh, sorted by name.
const std::vector<std::pair<std::string, std::string>>& embedded_headers();

}  // namespace mamba3_jit
