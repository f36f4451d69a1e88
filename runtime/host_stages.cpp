#include "host_stages.h"

#include <exception>
#include <string>

#include "logging.h"

namespace mamba3_jit {
namespace {

double micros(HostStages::Clock::time_point a, HostStages::Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

}  // namespace

HostStages::HostStages() : on_(logger().should_log(spdlog::level::trace)) {
  if (on_) start_ = Clock::now();
}

HostStages::~HostStages() {
  if (!on_) return;
  const auto end = Clock::now();
  std::string line;
  for (int i = 0; i < marks_; ++i) {
    line += fmt::format("{}{} {:.1f}", i ? ", " : "", names_[i], micros(i ? times_[i - 1] : start_, times_[i]));
  }
  logger().trace("host stages (us) of a call with T={} S={}{}: {}; total {:.1f}", T_, S_,
                 std::uncaught_exceptions() > 0 ? " (threw)" : "", line, micros(start_, end));
}

}  // namespace mamba3_jit
