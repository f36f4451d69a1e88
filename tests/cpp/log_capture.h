// Collects what the runtime's logger writes while a LogCapture lives; sets its level while a
// LevelGuard lives.
#pragma once

#include <spdlog/sinks/ostream_sink.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>

#include "logging.h"

namespace mamba3_jit::test {

class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(stream_)) {
    sink_->set_pattern("%l: %v");
    logger().sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = logger().sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  std::string text() const { return stream_.str(); }
  int count(const std::string& needle) const {
    const std::string t = text();
    int n = 0;
    for (auto pos = t.find(needle); pos != std::string::npos; pos = t.find(needle, pos + 1)) ++n;
    return n;
  }

 private:
  std::ostringstream stream_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

// Sets the runtime logger's level for the life of the guard.
class LevelGuard {
 public:
  explicit LevelGuard(spdlog::level::level_enum level) : saved_(logger().level()) { logger().set_level(level); }
  ~LevelGuard() { logger().set_level(saved_); }
  LevelGuard(const LevelGuard&) = delete;
  LevelGuard& operator=(const LevelGuard&) = delete;

 private:
  spdlog::level::level_enum saved_;
};

}  // namespace mamba3_jit::test
