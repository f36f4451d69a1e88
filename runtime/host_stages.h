// Where the host part of one operator call goes: with MAMBA3_JIT_LOG_LEVEL=trace every call logs
// the microseconds between its named stages (checks, read-back, allocations, launches). Before
// the first kernel starts, each of them is time the GPU sits idle, and a profiler's own overhead
// per API call hides exactly these gaps. Off, a stage costs one branch.
//
// No spdlog here: this header is included beside libtorch's headers, whose bundled fmt does not
// match the one spdlog is built on; the logging happens in host_stages.cpp.
#pragma once

#include <chrono>
#include <cstdint>

namespace mamba3_jit {

class HostStages {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kMaxMarks = 16;

  HostStages();
  ~HostStages();  // one trace line per call, on the normal and the exceptional path alike
  HostStages(const HostStages&) = delete;
  HostStages& operator=(const HostStages&) = delete;

  // Charges the time since the previous mark (or the start) to `stage`, a string literal. Only
  // the clock is read here, so that formatting is not charged to the stages.
  void mark(const char* stage) {
    if (!on_ || marks_ == kMaxMarks) return;
    names_[marks_] = stage;
    times_[marks_++] = Clock::now();
  }

  // The shape the log line names, once the checks have read it.
  void set_shape(int64_t T, int64_t S) { T_ = T, S_ = S; }

 private:
  bool on_;
  int marks_ = 0;
  int64_t T_ = -1, S_ = -1;
  Clock::time_point start_;
  const char* names_[kMaxMarks] = {};
  Clock::time_point times_[kMaxMarks];
};

}  // namespace mamba3_jit
