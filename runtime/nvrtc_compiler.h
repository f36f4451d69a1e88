// Pieces of the NVRTC compile that the cache key must agree with.
#pragma once

#include <string>
#include <vector>

namespace mamba3_jit {

// `arch`, or default_arch() when it is empty. Throws JitError unless it reads "sm_<digits>"
// with an optional letter suffix ("sm_90a"): NVRTC only emits a cubin for a real architecture.
std::string resolve_arch(const std::string& arch);

// The source's options as they are handed to NVRTC and hashed: each one trimmed of surrounding
// whitespace, empty ones dropped, order kept (a later -D or -I may depend on an earlier one).
// Whitespace inside an option is kept because it can be significant (-DX="a  b").
std::vector<std::string> normalize_options(const std::vector<std::string>& options);

// The lines of `text` that contain `needle`, joined by newlines (empty if none).
std::string lines_containing(const std::string& text, const std::string& needle);

// Options every compile gets before the source's own. The CUDA include directories are added
// after these; they are left out of the key because they name machine paths.
std::vector<std::string> builtin_options(const std::string& arch);

// "major.minor" of the NVRTC library in use.
const std::string& nvrtc_version();

}  // namespace mamba3_jit
