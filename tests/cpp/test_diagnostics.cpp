// The runtime's diagnostics: the per-call host stages and the occupancy log line.
#include <catch2/catch.hpp>

#include <stdexcept>

#include "host_stages.h"
#include "jit.h"
#include "log_capture.h"
#include "logging.h"

using namespace mamba3_jit;
using mamba3_jit::test::LevelGuard;
using mamba3_jit::test::LogCapture;

TEST_CASE("host stages log one line per call at trace level, naming each stage in order", "[diagnostics]") {
  LevelGuard level(spdlog::level::trace);
  LogCapture log;
  {
    HostStages stages;
    stages.set_shape(470, 3);
    stages.mark("checks");
    stages.mark("copy call");
    stages.mark("angle launch");
  }
  const std::string text = log.text();
  CHECK(log.count("host stages (us) of a call with T=470 S=3: ") == 1);
  const auto checks = text.find("checks "), copy = text.find("copy call "), launch = text.find("angle launch ");
  REQUIRE(checks != std::string::npos);
  REQUIRE(copy != std::string::npos);
  REQUIRE(launch != std::string::npos);
  CHECK((checks < copy && copy < launch));
  CHECK(log.count("total ") == 1);
  CHECK(log.count("(threw)") == 0);
}

TEST_CASE("host stages say when the call threw", "[diagnostics]") {
  LevelGuard level(spdlog::level::trace);
  LogCapture log;
  try {
    HostStages stages;
    stages.mark("checks");
    throw std::runtime_error("bad argument");
  } catch (const std::runtime_error&) {
  }
  CHECK(log.count("(threw)") == 1);
  CHECK(log.count("checks ") == 1);
}

TEST_CASE("host stages are silent above trace level", "[diagnostics]") {
  LevelGuard level(spdlog::level::debug);
  LogCapture log;
  {
    HostStages stages;
    stages.mark("checks");
  }
  CHECK(log.text().empty());
}

TEST_CASE("host stages keep the first marks when a call has more than fit", "[diagnostics]") {
  LevelGuard level(spdlog::level::trace);
  LogCapture log;
  {
    HostStages stages;
    for (int i = 0; i < HostStages::kMaxMarks + 4; ++i) stages.mark("stage");
  }
  CHECK(log.count("stage ") == HostStages::kMaxMarks);
}

TEST_CASE("an occupancy query that cannot be answered is logged at debug level, never thrown", "[diagnostics]") {
  // No function behind it: without a driver the API is unusable, with one the handle is invalid.
  const LoadedKernel none(nullptr, "m3_test_kernel");
  {
    LevelGuard level(spdlog::level::info);
    LogCapture log;
    CHECK_NOTHROW(none.log_occupancy(256, 1024));
    CHECK(log.text().empty());
  }
  LevelGuard level(spdlog::level::debug);
  LogCapture log;
  CHECK_NOTHROW(none.log_occupancy(256, 1024));
  CHECK(log.count("m3_test_kernel: occupancy not available (") == 1);
}
