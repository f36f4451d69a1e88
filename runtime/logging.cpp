#include "logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <string>

namespace mamba3_jit {
namespace {

constexpr const char* kLoggerName = "mamba3_jit";

// spdlog::level::from_str maps unknown names to "off", which would silently hide a typo; so the
// names are matched here and a bad value keeps the default and says so.
bool parse_level(std::string text, spdlog::level::level_enum* level) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  static const std::pair<const char*, spdlog::level::level_enum> kNames[] = {
      {"trace", spdlog::level::trace}, {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},   {"warn", spdlog::level::warn},
      {"warning", spdlog::level::warn}, {"error", spdlog::level::err},
      {"err", spdlog::level::err},     {"critical", spdlog::level::critical},
      {"off", spdlog::level::off}};
  for (const auto& [name, value] : kNames) {
    if (text == name) {
      *level = value;
      return true;
    }
  }
  return false;
}

std::shared_ptr<spdlog::logger> make_logger() {
  // Another copy of this library in the process (e.g. a tool and an extension) may already have
  // registered the name; sharing its logger keeps one configuration.
  if (auto existing = spdlog::get(kLoggerName)) return existing;
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto log = std::make_shared<spdlog::logger>(kLoggerName, std::move(sink));
  log->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] %v");
  spdlog::level::level_enum level = spdlog::level::warn;
  const char* env = std::getenv("MAMBA3_JIT_LOG_LEVEL");
  const bool bad_env = env && *env && !parse_level(env, &level);
  log->set_level(level);
  log->flush_on(spdlog::level::warn);
  try {
    spdlog::register_logger(log);
  } catch (const spdlog::spdlog_ex&) {
    if (auto existing = spdlog::get(kLoggerName)) return existing;
  }
  if (bad_env) {
    log->warn("MAMBA3_JIT_LOG_LEVEL='{}' is not one of trace, debug, info, warn, error, critical, "
              "off; using warn",
              env);
  }
  return log;
}

}  // namespace

spdlog::logger& logger() {
  // Never destroyed: code running from static destructors may still log.
  static auto* log = new std::shared_ptr<spdlog::logger>(make_logger());
  return **log;
}

}  // namespace mamba3_jit
