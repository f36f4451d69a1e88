// mamba3-jit-warmup: compiles every kernel specialisation into the on-disk cache ahead of time.
// It never opens the CUDA driver, so it runs on build machines without a GPU.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "jit.h"
#include "kernel_registry.h"

namespace {

void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: mamba3-jit-warmup [--arch sm_90a] [--cache-dir DIR] [--jobs N]\n"
               "                         [--config TEXT]... [--filter REGEX] [--limit N] [--list]\n"
               "Compiles kernel specialisations into the JIT cache: every one, or those the\n"
               "configurations given with --config can run. No GPU is needed.\n"
               "  --arch       target architecture (default sm_90a)\n"
               "  --cache-dir  cache directory (default: MAMBA3_JIT_CACHE_DIR, else\n"
               "               $XDG_CACHE_HOME/mamba3-jit, else ~/.cache/mamba3-jit)\n"
               "  --jobs       parallel compiles (default: number of CPUs)\n"
               "  --config     only what a call with this configuration can run: 'default' (the\n"
               "               operator's default) or the solver's CONFIG as key=value pairs, e.g.\n"
               "               'variant=v60,chunk=32,threads=256'; may be repeated\n"
               "  --filter     only specialisations whose name matches REGEX (search)\n"
               "  --limit      only the first N specialisations (after --filter)\n"
               "  --list       print each specialisation, its key and whether it is cached\n");
}

bool parse_count(const char* text, unsigned long* out) {
  char* end = nullptr;
  errno = 0;
  const unsigned long v = std::strtoul(text, &end, 10);
  if (errno || !end || *end || end == text) return false;
  *out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string arch = "sm_90a";
  std::string cache_dir;
  std::string filter;
  std::vector<mamba3_jit::OpConfig> configs;
  unsigned long jobs = std::max(1u, std::thread::hardware_concurrency());
  unsigned long limit = 0;
  bool list = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "mamba3-jit-warmup: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--arch") {
      arch = value();
    } else if (a == "--cache-dir") {
      cache_dir = value();
    } else if (a == "--jobs") {
      if (!parse_count(value(), &jobs) || jobs == 0) {
        std::fprintf(stderr, "mamba3-jit-warmup: --jobs needs a positive number\n");
        return 2;
      }
    } else if (a == "--config") {
      const std::string text = value();
      try {
        // parse_op_config refuses keys, values and configurations the registry does not know.
        configs.push_back(text == "default" ? mamba3_jit::OpConfig{} : mamba3_jit::parse_op_config(text));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "mamba3-jit-warmup: --config '%s': %s\n", text.c_str(), e.what());
        return 2;
      }
    } else if (a == "--filter") {
      filter = value();
    } else if (a == "--limit") {
      if (!parse_count(value(), &limit)) {
        std::fprintf(stderr, "mamba3-jit-warmup: --limit needs a number\n");
        return 2;
      }
    } else if (a == "--list") {
      list = true;
    } else if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    } else {
      std::fprintf(stderr, "mamba3-jit-warmup: unknown argument '%s'\n", a.c_str());
      usage(stderr);
      return 2;
    }
  }
  // An empty arch would ask the driver for the device's; this tool must not touch the driver.
  if (arch.empty()) {
    std::fprintf(stderr, "mamba3-jit-warmup: --arch must not be empty\n");
    return 2;
  }
  if (cache_dir.empty()) cache_dir = mamba3_jit::KernelCache::default_dir();

  try {
    std::vector<mamba3_jit::KernelSource> specs = configs.empty()
                                                       ? mamba3_jit::all_specializations(arch)
                                                       : mamba3_jit::specializations_for(configs, arch);
    if (!filter.empty()) {
      const std::regex re(filter);
      specs.erase(std::remove_if(specs.begin(), specs.end(),
                                 [&](const auto& s) { return !std::regex_search(s.name, re); }),
                  specs.end());
    }
    if (limit > 0 && specs.size() > limit) specs.resize(limit);
    for (auto& s : specs) {
      if (s.arch.empty()) s.arch = arch;
    }

    mamba3_jit::KernelCache cache(cache_dir);
    if (list) {
      for (const auto& s : specs) {
        std::printf("%s  %s  %s\n", cache.key(s).c_str(), cache.contains(s) ? "cached " : "missing",
                    s.name.c_str());
      }
      return 0;
    }
    if (!cache.persistent()) {
      std::fprintf(stderr, "mamba3-jit-warmup: cache directory %s cannot be written\n",
                   cache_dir.c_str());
      return 1;
    }

    const std::size_t n = specs.size();
    std::atomic<std::size_t> next{0};
    std::atomic<std::size_t> compiled{0}, cached{0}, failed{0}, done{0};
    std::mutex out_mu;
    auto worker = [&] {
      for (std::size_t i = next++; i < n; i = next++) {
        const auto& s = specs[i];
        const auto start = std::chrono::steady_clock::now();
        std::string line;
        try {
          const auto r = cache.get_or_compile(s);
          const double secs =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          char t[32];
          std::snprintf(t, sizeof(t), "%.1fs", secs);
          switch (r.outcome) {
            case mamba3_jit::CacheOutcome::kCompiled:
              ++compiled;
              line = "compiled " + s.name + " in " + t;
              break;
            case mamba3_jit::CacheOutcome::kRecompiledCorrupt:
              ++compiled;
              line = "recompiled corrupt entry " + r.key + " " + s.name + " in " + t;
              break;
            case mamba3_jit::CacheOutcome::kDiskHit:
            case mamba3_jit::CacheOutcome::kMemoryHit:
              ++cached;
              line = "cached " + s.name;
              break;
          }
        } catch (const std::exception& e) {
          ++failed;
          line = "FAILED " + s.name + ": " + e.what();
        }
        std::lock_guard<std::mutex> lock(out_mu);
        std::printf("[%zu/%zu] %s\n", ++done, n, line.c_str());
        std::fflush(stdout);
      }
    };
    std::vector<std::thread> threads;
    const std::size_t nthreads = std::min<std::size_t>(jobs, std::max<std::size_t>(n, 1));
    for (std::size_t t = 0; t < nthreads; ++t) threads.emplace_back(worker);
    for (auto& t : threads) t.join();
    std::printf("warmup: %zu specializations, %zu compiled, %zu cached, %zu failed\n", n,
                compiled.load(), cached.load(), failed.load());
    return failed > 0 ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mamba3-jit-warmup: %s\n", e.what());
    return 1;
  }
}
