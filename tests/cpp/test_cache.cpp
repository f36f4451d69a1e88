#include <catch2/catch.hpp>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <thread>

#include "jit.h"
#include "kernel_cache.h"
#include "log_capture.h"
#include "logging.h"
#include "test_util.h"

using namespace mamba3_jit;
using mamba3_jit::test::LogCapture;
namespace fs = std::filesystem;

namespace {

std::string cubin_file(const std::string& dir, const std::string& key) {
  return dir + "/" + key + ".cubin";
}
std::string manifest_file(const std::string& dir, const std::string& key) {
  return dir + "/" + key + ".json";
}

void set_mtime(const std::string& path, time_t seconds_ago) {
  struct timeval tv[2];
  gettimeofday(&tv[0], nullptr);
  tv[0].tv_sec -= seconds_ago;
  tv[1] = tv[0];
  REQUIRE(::utimes(path.c_str(), tv) == 0);
}

// Damages an entry on disk, then checks that a fresh cache object notices, quarantines it and
// publishes a valid replacement.
void check_recovery(const std::string& tag, void (*damage)(const std::string& dir, const std::string& key)) {
  test::TempDir tmp;
  const KernelSource src = test::smoke_source(tag);
  std::string key, original;
  {
    KernelCache cache(tmp.path());
    const CacheResult r = cache.get_or_compile(src);
    key = r.key;
    original = *r.cubin;
  }
  damage(tmp.path(), key);
  LogCapture log;
  KernelCache cache(tmp.path());
  CHECK_FALSE(cache.contains(src));
  const CacheResult r = cache.get_or_compile(src);
  CHECK(r.outcome == CacheOutcome::kRecompiledCorrupt);
  CHECK(*r.cubin == original);
  CHECK(verify_entry(tmp.path(), key).empty());
  INFO(log.text());
  CHECK(log.count("warning: ") == 1);
  CHECK(log.text().find("is corrupt") != std::string::npos);
  const auto quarantined = test::files_with_prefix(tmp.sub("quarantine"), key);
  CHECK(quarantined.size() >= 2);  // manifest, reason and whatever was left of the cubin
  CHECK(KernelCache(tmp.path()).get_or_compile(src).outcome == CacheOutcome::kDiskHit);
}

}  // namespace

TEST_CASE("cache keys depend on exactly the key material", "[cache]") {
  KernelCache cache("");
  const KernelSource a = test::smoke_source("keys");
  const std::string ka = cache.key(a);
  CHECK(ka.size() == 64);
  CHECK(ka.find_first_not_of("0123456789abcdef") == std::string::npos);

  KernelSource b = a;
  b.name = "another name";
  CHECK(cache.key(b) == ka);  // the name only labels logs
  b = a;
  b.options = {"  " + a.options[0] + "\t", ""};
  CHECK(cache.key(b) == ka);  // surrounding whitespace and empty options are normalised away
  b = a;
  b.options.push_back("-DX=1");
  CHECK(cache.key(b) != ka);
  b = a;
  b.arch = "sm_80";
  CHECK(cache.key(b) != ka);
  b = a;
  b.code += "\n";
  CHECK(cache.key(b) != ka);
  // Option order is kept: it can matter to the preprocessor.
  KernelSource c = a, d = a;
  c.options = {"-DA=1", "-DB=2"};
  d.options = {"-DB=2", "-DA=1"};
  CHECK(cache.key(c) != cache.key(d));
}

TEST_CASE("a miss compiles, then memory and disk hits follow", "[cache]") {
  test::TempDir tmp;
  const KernelSource src = test::smoke_source("missthenhit");
  std::string key;
  {
    KernelCache cache(tmp.path());
    CHECK(cache.persistent());
    CHECK(cache.dir() == tmp.path());
    CHECK_FALSE(cache.contains(src));
    const CacheResult first = cache.get_or_compile(src);
    CHECK(first.outcome == CacheOutcome::kCompiled);
    CHECK(first.key == cache.key(src));
    CHECK(first.cubin->compare(0, 4, "\x7f" "ELF") == 0);
    const CacheResult second = cache.get_or_compile(src);
    CHECK(second.outcome == CacheOutcome::kMemoryHit);
    CHECK(second.cubin == first.cubin);
    CHECK(cache.contains(src));
    key = first.key;
  }
  REQUIRE(fs::exists(cubin_file(tmp.path(), key)));
  REQUIRE(fs::exists(manifest_file(tmp.path(), key)));
  const std::string manifest = test::read_text(manifest_file(tmp.path(), key));
  CHECK(manifest.find("\"arch\": \"sm_90a\"") != std::string::npos);
  CHECK(manifest.find("\"name\": \"smoke[missthenhit]\"") != std::string::npos);
  CHECK(manifest.find("-DM3_TEST_TAG_missthenhit=1") != std::string::npos);
  CHECK(test::files_with_prefix(tmp.path(), ".tmp").empty());

  set_mtime(manifest_file(tmp.path(), key), 7200);
  const auto before = fs::last_write_time(manifest_file(tmp.path(), key));
  KernelCache again(tmp.path());
  CHECK(again.contains(src));
  const CacheResult disk = again.get_or_compile(src);
  CHECK(disk.outcome == CacheOutcome::kDiskHit);
  CHECK(disk.key == key);
  // A disk hit refreshes the entry's last use.
  CHECK(fs::last_write_time(manifest_file(tmp.path(), key)) > before);
  CHECK(again.get_or_compile(src).outcome == CacheOutcome::kMemoryHit);
}

TEST_CASE("an empty directory means a memory-only cache", "[cache]") {
  LogCapture log;
  KernelCache cache("");
  CHECK_FALSE(cache.persistent());
  const KernelSource src = test::smoke_source("memonly");
  CHECK(cache.get_or_compile(src).outcome == CacheOutcome::kCompiled);
  CHECK(cache.get_or_compile(src).outcome == CacheOutcome::kMemoryHit);
  CHECK(log.text().empty());
}

TEST_CASE("a corrupted cubin is quarantined and recompiled", "[cache]") {
  check_recovery("flipped", [](const std::string& dir, const std::string& key) {
    std::string bytes = test::read_text(cubin_file(dir, key));
    for (std::size_t i = bytes.size() / 2; i < bytes.size() / 2 + 16; ++i) bytes[i] ^= 0x5a;
    test::write_text(cubin_file(dir, key), bytes);
    CHECK(verify_entry(dir, key).find("SHA-256") != std::string::npos);
  });
}

TEST_CASE("a truncated cubin is quarantined and recompiled", "[cache]") {
  check_recovery("truncated", [](const std::string& dir, const std::string& key) {
    fs::resize_file(cubin_file(dir, key), 100);
    CHECK(verify_entry(dir, key).find("bytes") != std::string::npos);
  });
}

TEST_CASE("a truncated manifest is quarantined and recompiled", "[cache]") {
  check_recovery("badmanifest", [](const std::string& dir, const std::string& key) {
    fs::resize_file(manifest_file(dir, key), 40);
    CHECK(verify_entry(dir, key).find("parse") != std::string::npos);
  });
}

TEST_CASE("an entry whose cubin vanished is recompiled", "[cache]") {
  check_recovery("nocubin", [](const std::string& dir, const std::string& key) {
    fs::remove(cubin_file(dir, key));
    CHECK(!verify_entry(dir, key).empty());
  });
}

TEST_CASE("a manifest number out of range is quarantined, not thrown", "[cache]") {
  // One digit too many past LLONG_MAX used to escape the parser as std::out_of_range: the
  // cache tool aborted in verify and the warm-up counted the kernel as failed.
  check_recovery("hugenumber", [](const std::string& dir, const std::string& key) {
    std::string text = test::read_text(manifest_file(dir, key));
    const auto at = text.find("\"cubin_size\": ");
    REQUIRE(at != std::string::npos);
    const auto from = at + std::strlen("\"cubin_size\": ");
    text.replace(from, text.find(',', from) - from, "9999999999999999999");
    test::write_text(manifest_file(dir, key), text);
    CHECK(verify_entry(dir, key).find("bad value for 'cubin_size'") != std::string::npos);
  });
}

TEST_CASE("a corrupt entry is recompiled when the quarantine cannot be made", "[cache]") {
  // A regular file where the quarantine directory belongs: the damaged files cannot be moved
  // aside, so they are deleted instead, and the entry is written afresh.
  test::TempDir tmp;
  const KernelSource src = test::smoke_source("noquarantine");
  const CacheResult first = KernelCache(tmp.path()).get_or_compile(src);
  fs::resize_file(cubin_file(tmp.path(), first.key), 10);
  test::write_text(tmp.sub("quarantine"), "not a directory");
  KernelCache cache(tmp.path());
  const CacheResult r = cache.get_or_compile(src);
  CHECK(r.outcome == CacheOutcome::kRecompiledCorrupt);
  CHECK(*r.cubin == *first.cubin);
  CHECK(verify_entry(tmp.path(), r.key).empty());
  CHECK(test::read_text(tmp.sub("quarantine")) == "not a directory");
  CHECK(prune(tmp.path(), UINT64_MAX).entries_left == 1);
}

TEST_CASE("a write that fails for lack of space leaves no entry and no temporary file", "[cache]") {
  // RLIMIT_FSIZE makes every write past the limit fail with EFBIG, which is how a full disk
  // looks to the writer, without needing a small filesystem (and it stops root as well). It is
  // set in a child so the test process keeps its own limits.
  test::TempDir tmp;
  const KernelSource src = test::smoke_source("fulldisk");
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int code = 0;
    try {
      std::signal(SIGXFSZ, SIG_IGN);
      const struct rlimit lim = {512, 512};
      if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) ::_exit(10);
      LogCapture log;
      KernelCache cache(tmp.path());
      if (!cache.persistent()) code = 11;  // the probe file is empty, so it still fits
      const CacheResult r = cache.get_or_compile(src);
      if (r.outcome != CacheOutcome::kCompiled || r.cubin->compare(0, 4, "\x7f" "ELF") != 0) code = 12;
      if (log.count("warning: ") != 1 || log.text().find("cannot write") == std::string::npos) code = 13;
      if (cache.get_or_compile(src).outcome != CacheOutcome::kMemoryHit) code = 14;
    } catch (...) {
      code = 15;
    }
    ::_exit(code);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(list_entries(tmp.path()).empty());
  CHECK(test::files_with_prefix(tmp.path(), ".tmp").empty());
  CHECK(test::files_with_prefix(tmp.path(), KernelCache("").key(src)).empty());

  KernelCache cache(tmp.path());
  const CacheResult r = cache.get_or_compile(src);
  CHECK(r.outcome == CacheOutcome::kCompiled);
  CHECK(verify_entry(tmp.path(), r.key).empty());
}

TEST_CASE("the leftovers of a killed writer are neither trusted nor kept", "[cache]") {
  test::TempDir tmp;
  const KernelSource src = test::smoke_source("killedwriter");
  std::string cubin;
  {
    test::TempDir scratch;
    cubin = *KernelCache(scratch.path()).get_or_compile(src).cubin;
  }
  const std::string key = KernelCache("").key(src);
  // A writer killed mid-write leaves its temporary files under its own (now dead) pid; one
  // killed between the two renames leaves a cubin without a manifest.
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::string host_tag;
  for (const char* p = host; *p; ++p) host_tag += std::isalnum(static_cast<unsigned char>(*p)) || *p == '-' || *p == '_' ? *p : '_';
  const std::string stem = tmp.sub(".tmp." + host_tag + "." + std::to_string(dead) + ".1.00000000000000aa");
  test::write_text(stem + ".cubin", cubin.substr(0, cubin.size() / 2));
  test::write_text(stem + ".json", "{\n  \"format_version\": 1,\n");
  test::write_text(cubin_file(tmp.path(), key), cubin.substr(0, 64));
  CHECK(stat_cache(tmp.path()).stale_temp_files == 2);
  CHECK(stat_cache(tmp.path()).orphan_cubins == 1);

  KernelCache cache(tmp.path());
  const CacheResult r = cache.get_or_compile(src);
  CHECK(r.outcome == CacheOutcome::kCompiled);
  CHECK(*r.cubin == cubin);
  CHECK(verify_entry(tmp.path(), key).empty());
  CHECK(test::read_text(cubin_file(tmp.path(), key)) == cubin);
  const PruneResult p = prune(tmp.path(), UINT64_MAX);
  CHECK(p.temp_files_removed == 2);
  CHECK(p.entries_left == 1);
  CHECK(test::files_with_prefix(tmp.path(), ".tmp").empty());
}

TEST_CASE("an entry stored under a foreign key is not trusted", "[cache]") {
  test::TempDir tmp;
  const KernelSource a = test::smoke_source("foreign_a");
  const KernelSource b = test::smoke_source("foreign_b");
  KernelCache cache(tmp.path());
  const std::string ka = cache.get_or_compile(a).key;
  const std::string kb = cache.key(b);
  fs::copy_file(cubin_file(tmp.path(), ka), cubin_file(tmp.path(), kb));
  fs::copy_file(manifest_file(tmp.path(), ka), manifest_file(tmp.path(), kb));
  CHECK(verify_entry(tmp.path(), kb).find("belongs to key") != std::string::npos);
  KernelCache fresh(tmp.path());
  CHECK(fresh.get_or_compile(b).outcome == CacheOutcome::kRecompiledCorrupt);
  CHECK(verify_entry(tmp.path(), kb).empty());
}

TEST_CASE("an unusable cache directory falls back to memory and warns once", "[cache]") {
  // Tests may run as root, for whom permission bits do not stop writes; a directory below a
  // regular file cannot be created by anyone.
  test::TempDir tmp;
  test::write_text(tmp.sub("not-a-dir"), "x");
  const std::string dir = tmp.sub("not-a-dir") + "/cache";
  LogCapture log;
  KernelCache cache(dir);
  CHECK_FALSE(cache.persistent());
  const KernelSource a = test::smoke_source("unwritable_a");
  const KernelSource b = test::smoke_source("unwritable_b");
  CHECK(cache.get_or_compile(a).outcome == CacheOutcome::kCompiled);
  CHECK(cache.get_or_compile(b).outcome == CacheOutcome::kCompiled);
  CHECK(cache.get_or_compile(a).outcome == CacheOutcome::kMemoryHit);
  CHECK(cache.contains(a));
  INFO(log.text());
  CHECK(log.count("warning: ") == 1);
  CHECK(log.count(dir) == 1);
}

TEST_CASE("8 threads asking for one key compile it once", "[cache][concurrency]") {
  test::TempDir tmp;
  KernelCache cache(tmp.path());
  const KernelSource src = test::smoke_source("threads");
  std::vector<CacheResult> results(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] { results[i] = cache.get_or_compile(src); });
  }
  for (auto& t : threads) t.join();
  int compiled = 0, memory = 0;
  for (const auto& r : results) {
    compiled += r.outcome == CacheOutcome::kCompiled;
    memory += r.outcome == CacheOutcome::kMemoryHit;
    CHECK(r.cubin == results[0].cubin);
  }
  CHECK(compiled == 1);
  CHECK(memory == 7);
}

TEST_CASE("a failing compile reaches every waiting thread and is retried later", "[cache][concurrency]") {
  KernelCache cache("");
  KernelSource src;
  src.name = "fails";
  src.code = "extern \"C\" __global__ void k() { not_declared(); }\n";
  src.arch = "sm_90a";
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      try {
        cache.get_or_compile(src);
      } catch (const NvrtcError&) {
        ++errors;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(errors == 4);
  CHECK_FALSE(cache.contains(src));
  CHECK_THROWS_AS(cache.get_or_compile(src), NvrtcError);
}

TEST_CASE("8 processes racing into one empty directory leave one valid entry", "[cache][concurrency]") {
  test::TempDir tmp;
  const std::string dir = tmp.sub("cache");  // created by the racers themselves
  const KernelSource src = test::smoke_source("fork_race");
  int gate[2];
  REQUIRE(::pipe(gate) == 0);
  std::vector<pid_t> children;
  for (int i = 0; i < 8; ++i) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(gate[1]);
      char c;
      while (::read(gate[0], &c, 1) > 0) {
      }
      int code = 0;
      try {
        KernelCache cache(dir);
        const CacheResult r = cache.get_or_compile(src);
        if (!cache.persistent() || r.cubin->compare(0, 4, "\x7f" "ELF") != 0) code = 1;
      } catch (...) {
        code = 2;
      }
      ::_exit(code);
    }
    children.push_back(pid);
  }
  ::close(gate[0]);
  ::close(gate[1]);  // all children start at once
  for (const pid_t pid : children) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  const auto entries = list_entries(dir);
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].key == KernelCache("").key(src));
  CHECK(verify_entry(dir, entries[0].key).empty());
  CHECK(test::files_with_prefix(dir, ".tmp").empty());
  CHECK_FALSE(fs::exists(dir + "/quarantine"));
  CHECK(KernelCache(dir).get_or_compile(src).outcome == CacheOutcome::kDiskHit);
}

TEST_CASE("list, stat and prune work on a cache directory", "[cache][maintenance]") {
  test::TempDir tmp;
  std::vector<std::string> keys;
  {
    KernelCache cache(tmp.path());
    for (const char* tag : {"prune_a", "prune_b", "prune_c"}) {
      keys.push_back(cache.get_or_compile(test::smoke_source(tag)).key);
    }
  }
  // a used longest ago, then c, then b.
  set_mtime(manifest_file(tmp.path(), keys[0]), 300);
  set_mtime(manifest_file(tmp.path(), keys[1]), 100);
  set_mtime(manifest_file(tmp.path(), keys[2]), 200);
  auto entries = list_entries(tmp.path());
  REQUIRE(entries.size() == 3);
  CHECK(entries[0].key == keys[0]);
  CHECK(entries[1].key == keys[2]);
  CHECK(entries[2].key == keys[1]);
  std::uint64_t total = 0;
  for (const auto& e : entries) {
    CHECK(e.bytes == fs::file_size(cubin_file(tmp.path(), e.key)) +
                         fs::file_size(manifest_file(tmp.path(), e.key)));
    total += e.bytes;
  }

  // Temporary files: an old one, one of a dead writer on this host, one of a live writer.
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::string host_tag;
  for (const char* p = host; *p; ++p) host_tag += std::isalnum(static_cast<unsigned char>(*p)) || *p == '-' || *p == '_' ? *p : '_';
  const std::string old_tmp = tmp.sub(".tmp.otherhost.12345.1.00000000deadbeef.cubin");
  const std::string live_tmp = tmp.sub(".tmp." + host_tag + "." + std::to_string(::getpid()) + ".1.0000000000000001.json");
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const std::string dead_tmp = tmp.sub(".tmp." + host_tag + "." + std::to_string(dead) + ".1.0000000000000002.cubin");
  for (const auto& p : {old_tmp, live_tmp, dead_tmp}) test::write_text(p, "partial");
  set_mtime(old_tmp, 2 * 3600);
  CHECK(is_stale_temp_file(old_tmp));
  CHECK(is_stale_temp_file(dead_tmp));
  CHECK_FALSE(is_stale_temp_file(live_tmp));
  // Temporary files are never mistaken for entries.
  CHECK(list_entries(tmp.path()).size() == 3);

  const CacheStats s = stat_cache(tmp.path());
  CHECK(s.entries == 3);
  CHECK(s.entry_bytes == total);
  CHECK(s.temp_files == 3);
  CHECK(s.stale_temp_files == 2);

  const PruneResult r = prune(tmp.path(), total - entries[0].bytes);
  CHECK(r.entries_removed == 1);
  CHECK(r.temp_files_removed == 2);
  CHECK(r.entries_left == 2);
  CHECK(r.bytes_left == total - entries[0].bytes);
  CHECK_FALSE(fs::exists(manifest_file(tmp.path(), keys[0])));
  CHECK_FALSE(fs::exists(cubin_file(tmp.path(), keys[0])));
  CHECK(fs::exists(live_tmp));
  CHECK_FALSE(fs::exists(old_tmp));
  CHECK_FALSE(fs::exists(dead_tmp));

  const PruneResult all = prune(tmp.path(), 0);
  CHECK(all.entries_removed == 2);
  CHECK(list_entries(tmp.path()).empty());
}
