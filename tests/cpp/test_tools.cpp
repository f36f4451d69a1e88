// The warm-up and cache tools, run as the separate programs users run.
#include <catch2/catch.hpp>

#include <filesystem>
#include <regex>

#include "kernel_cache.h"
#include "kernel_registry.h"
#include "test_util.h"

using namespace mamba3_jit;
namespace fs = std::filesystem;

namespace {

struct Summary {
  long n = -1, compiled = -1, cached = -1, failed = -1;
};

Summary parse_summary(const std::string& output) {
  static const std::regex re(
      R"(^warmup: (\d+) specializations, (\d+) compiled, (\d+) cached, (\d+) failed$)");
  std::smatch m;
  Summary s;
  const std::string line = test::last_line(output);
  if (std::regex_match(line, m, re)) {
    s.n = std::stol(m[1]);
    s.compiled = std::stol(m[2]);
    s.cached = std::stol(m[3]);
    s.failed = std::stol(m[4]);
  }
  return s;
}

// Bounds the warm-up tests' compile time as the registry grows: the first specialisations are
// enough to exercise the tool; "every specialisation compiles" is tested in-process.
const char* kLimit = " --limit 3";

std::string warmup(const std::string& dir) {
  return std::string(MAMBA3_JIT_WARMUP_EXE) + " --arch sm_90a --jobs 2 --cache-dir " + dir + kLimit;
}

long expected_count() {
  return static_cast<long>(std::min<std::size_t>(3, all_specializations("sm_90a").size()));
}

}  // namespace

TEST_CASE("warm-up compiles, then finds everything cached, then repairs a corrupt entry", "[tools]") {
  test::TempDir tmp;
  const std::string dir = tmp.sub("cache");

  const auto first = test::run_command(warmup(dir), tmp.path());
  INFO(first.out);
  const Summary s1 = parse_summary(first.out);
  CHECK(s1.n == expected_count());
  CHECK(s1.failed == 0);
  CHECK(s1.compiled > 0);
  CHECK(s1.compiled + s1.cached == s1.n);
  CHECK(first.exit_code == 0);
  CHECK(first.out.find("[1/") != std::string::npos);

  const auto second = test::run_command(warmup(dir), tmp.path());
  INFO(second.out);
  const Summary s2 = parse_summary(second.out);
  CHECK(s2.compiled == 0);
  CHECK(s2.cached == s1.n);
  CHECK(s2.failed == 0);
  CHECK(second.exit_code == 0);

  const auto entries = list_entries(dir);
  REQUIRE(!entries.empty());
  const std::string victim = entries[0].key;
  fs::resize_file(dir + "/" + victim + ".cubin", 10);
  const auto verify_bad = test::run_command(
      std::string(MAMBA3_JIT_CACHE_EXE) + " --cache-dir " + dir + " verify", tmp.path());
  CHECK(verify_bad.exit_code != 0);
  CHECK(verify_bad.out.find("corrupt " + victim) != std::string::npos);

  const auto third = test::run_command(warmup(dir), tmp.path());
  INFO(third.out);
  const Summary s3 = parse_summary(third.out);
  CHECK(third.out.find("recompiled corrupt entry " + victim) != std::string::npos);
  CHECK(s3.compiled == 1);
  CHECK(s3.failed == 0);
  CHECK(third.exit_code == 0);
  CHECK(verify_entry(dir, victim).empty());
}

TEST_CASE("warm-up --list names every specialisation without compiling", "[tools]") {
  test::TempDir tmp;
  const auto r = test::run_command(
      std::string(MAMBA3_JIT_WARMUP_EXE) + " --list --cache-dir " + tmp.sub("cache"), tmp.path());
  INFO(r.out);
  CHECK(r.exit_code == 0);
  for (const auto& s : all_specializations("sm_90a")) {
    CHECK(r.out.find(s.name) != std::string::npos);
  }
  CHECK(list_entries(tmp.sub("cache")).empty());
}

TEST_CASE("warm-up --config lists what that configuration can run, and only that", "[tools]") {
  test::TempDir tmp;
  const std::string base = std::string(MAMBA3_JIT_WARMUP_EXE) + " --list --cache-dir " + tmp.sub("cache");
  const auto r = test::run_command(base + " --config variant=v60 --config variant=v59", tmp.path());
  INFO(r.out);
  CHECK(r.exit_code == 0);
  const auto expected = specializations_for({parse_op_config("variant=v60")}, "sm_90a");
  std::size_t lines = 0;
  for (std::size_t at = r.out.find('\n'); at != std::string::npos; at = r.out.find('\n', at + 1)) ++lines;
  CHECK(lines == expected.size());  // v59's kernels are v60's already: listed once
  for (const auto& s : expected) CHECK(r.out.find(s.name) != std::string::npos);
  CHECK(r.out.find("[v47,") == std::string::npos);
  const auto d = test::run_command(base + " --config default", tmp.path());
  INFO(d.out);
  CHECK(d.exit_code == 0);
  for (const auto& s : specializations_for({OpConfig{}}, "sm_90a")) CHECK(d.out.find(s.name) != std::string::npos);
  CHECK(list_entries(tmp.sub("cache")).empty());
}

TEST_CASE("warm-up rejects bad arguments", "[tools]") {
  test::TempDir tmp;
  const auto unknown = test::run_command(std::string(MAMBA3_JIT_WARMUP_EXE) + " --config variant=v999", tmp.path());
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.out.find("--config 'variant=v999'") != std::string::npos);
  CHECK(test::run_command(std::string(MAMBA3_JIT_WARMUP_EXE) + " --config colour=blue", tmp.path()).exit_code == 2);
  CHECK(test::run_command(std::string(MAMBA3_JIT_WARMUP_EXE) + " --bogus", tmp.path()).exit_code == 2);
  CHECK(test::run_command(std::string(MAMBA3_JIT_WARMUP_EXE) + " --jobs 0", tmp.path()).exit_code == 2);
  CHECK(test::run_command(std::string(MAMBA3_JIT_CACHE_EXE) + " prune", tmp.path()).exit_code == 2);
}

TEST_CASE("two concurrent warm-ups into one empty directory both succeed", "[tools][concurrency]") {
  test::TempDir tmp;
  const std::string dir = tmp.sub("cache");
  const std::string cmd = "(" + warmup(dir) + " >" + tmp.sub("out1") + " 2>&1; echo $? >" +
                          tmp.sub("rc1") + ") & (" + warmup(dir) + " >" + tmp.sub("out2") +
                          " 2>&1; echo $? >" + tmp.sub("rc2") + ") & wait";
  REQUIRE(std::system(("sh -c '" + cmd + "'").c_str()) == 0);
  for (const char* i : {"1", "2"}) {
    const std::string out = test::read_text(tmp.sub(std::string("out") + i));
    INFO(out);
    CHECK(test::read_text(tmp.sub(std::string("rc") + i)) == "0\n");
    const Summary s = parse_summary(out);
    CHECK(s.n == expected_count());
    CHECK(s.failed == 0);
  }
  const auto verify = test::run_command(
      std::string(MAMBA3_JIT_CACHE_EXE) + " --cache-dir " + dir + " verify", tmp.path());
  INFO(verify.out);
  CHECK(verify.exit_code == 0);
  CHECK(verify.out.find("corrupt ") == std::string::npos);
  CHECK(list_entries(dir).size() == static_cast<std::size_t>(expected_count()));
  CHECK(test::files_with_prefix(dir, ".tmp").empty());
}

TEST_CASE("the cache tool reports and prunes", "[tools]") {
  test::TempDir tmp;
  const std::string dir = tmp.sub("cache");
  REQUIRE(test::run_command(warmup(dir), tmp.path()).exit_code == 0);
  const std::string tool = std::string(MAMBA3_JIT_CACHE_EXE) + " --cache-dir " + dir;
  const auto stat = test::run_command(tool + " stat", tmp.path());
  INFO(stat.out);
  CHECK(stat.exit_code == 0);
  CHECK(stat.out.find("entries: " + std::to_string(expected_count())) != std::string::npos);
  const auto prune = test::run_command(tool + " prune --max-bytes 0", tmp.path());
  INFO(prune.out);
  CHECK(prune.exit_code == 0);
  CHECK(list_entries(dir).empty());
  CHECK(test::run_command(tool + " stat", tmp.path()).out.find("entries: 0") != std::string::npos);
}
