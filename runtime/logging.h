// The runtime's own spdlog logger, "mamba3_jit". It is kept apart from spdlog's default logger so
// that a host application's logging setup is neither changed nor relied upon.
#pragma once

#include <spdlog/spdlog.h>

namespace mamba3_jit {

// Level from MAMBA3_JIT_LOG_LEVEL (trace, debug, info, warn, error, critical, off), default warn;
// writes to stderr. Created on first use.
spdlog::logger& logger();

}  // namespace mamba3_jit
