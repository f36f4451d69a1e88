// mamba3-jit-cache: inspect and maintain a JIT cache directory.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

#include "jit.h"
#include "kernel_cache.h"

namespace {

void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: mamba3-jit-cache [--cache-dir DIR] stat|verify|prune --max-bytes B\n"
               "  stat     count entries and bytes\n"
               "  verify   check every entry's manifest and checksum; exit 1 if any is corrupt\n"
               "  prune    evict least recently used entries until at most B bytes remain;\n"
               "           also remove stale temporary files, orphaned cubins and the quarantine\n");
}

std::string when(std::int64_t ns) {
  const std::time_t t = static_cast<std::time_t>(ns / 1000000000LL);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  std::string command;
  std::string max_bytes_text;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "mamba3-jit-cache: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--cache-dir") {
      dir = value();
    } else if (a == "--max-bytes") {
      max_bytes_text = value();
    } else if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    } else if (command.empty() && (a == "stat" || a == "verify" || a == "prune")) {
      command = a;
    } else {
      std::fprintf(stderr, "mamba3-jit-cache: unexpected argument '%s'\n", a.c_str());
      usage(stderr);
      return 2;
    }
  }
  if (command.empty()) {
    usage(stderr);
    return 2;
  }
  if (dir.empty()) dir = mamba3_jit::KernelCache::default_dir();

  if (command == "stat") {
    const auto s = mamba3_jit::stat_cache(dir);
    std::printf("cache directory: %s\n", dir.c_str());
    std::printf("entries: %zu\n", s.entries);
    std::printf("bytes: %llu\n", static_cast<unsigned long long>(s.entry_bytes));
    std::printf("temporary files: %zu (%zu stale)\n", s.temp_files, s.stale_temp_files);
    std::printf("orphaned cubins: %zu\n", s.orphan_cubins);
    std::printf("quarantined files: %zu (%llu bytes)\n", s.quarantined_files,
                static_cast<unsigned long long>(s.quarantined_bytes));
    return 0;
  }

  if (command == "verify") {
    std::size_t n = 0, bad = 0;
    for (const auto& e : mamba3_jit::list_entries(dir)) {
      ++n;
      const std::string why = mamba3_jit::verify_entry(dir, e.key);
      // An entry evicted while we looked is not damage.
      if (why.empty() || why == "no such entry") continue;
      ++bad;
      std::printf("corrupt %s: %s (last used %s)\n", e.key.c_str(), why.c_str(),
                  when(e.last_used_ns).c_str());
    }
    std::printf("verify: %zu entries, %zu corrupt\n", n, bad);
    return bad > 0 ? 1 : 0;
  }

  // prune
  if (max_bytes_text.empty()) {
    std::fprintf(stderr, "mamba3-jit-cache: prune needs --max-bytes B\n");
    return 2;
  }
  char* end = nullptr;
  errno = 0;
  const unsigned long long max_bytes = std::strtoull(max_bytes_text.c_str(), &end, 10);
  if (errno || !end || *end || max_bytes_text[0] == '-') {
    std::fprintf(stderr, "mamba3-jit-cache: --max-bytes needs a byte count\n");
    return 2;
  }
  const auto r = mamba3_jit::prune(dir, max_bytes);
  std::printf(
      "prune: removed %zu entries (%llu bytes), %zu temporary files, %zu orphaned cubins, %zu "
      "quarantined files; %zu entries (%llu bytes) left\n",
      r.entries_removed, static_cast<unsigned long long>(r.bytes_removed), r.temp_files_removed,
      r.orphans_removed, r.quarantined_removed, r.entries_left,
      static_cast<unsigned long long>(r.bytes_left));
  return 0;
}
