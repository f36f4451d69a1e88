#include "nvrtc_compiler.h"

#include <nvrtc.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "embedded_headers.h"
#include "jit.h"
#include "logging.h"
#include "sha256.h"

namespace mamba3_jit {
namespace {

[[noreturn]] void throw_call_failed(const std::string& call, nvrtcResult r, const std::string& name) {
  throw NvrtcError(call + " failed for kernel '" + name + "': " + nvrtcGetErrorString(r), "", "");
}

void check_nvrtc(nvrtcResult r, const char* call, const std::string& name) {
  if (r != NVRTC_SUCCESS) throw_call_failed(call, r, name);
}

struct Program {
  nvrtcProgram prog = nullptr;
  ~Program() {
    if (prog) nvrtcDestroyProgram(&prog);
  }
};

std::vector<std::string> cuda_include_options() {
  std::vector<std::string> out;
#ifdef MAMBA3_JIT_CUDA_INCLUDE_DIR
  std::stringstream dirs(MAMBA3_JIT_CUDA_INCLUDE_DIR);
  std::string dir;
  while (std::getline(dirs, dir, ';')) {
    if (dir.empty()) continue;
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) continue;
    out.push_back("-I" + dir);
    // CUDA 13 keeps libcu++/CUB/Thrust under include/cccl.
    if (std::filesystem::is_directory(dir + "/cccl", ec)) out.push_back("-I" + dir + "/cccl");
  }
#endif
  return out;
}

std::string program_file_name(const std::string& kernel_name) {
  std::string out;
  for (char c : kernel_name) {
    const bool plain = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
    out += plain ? c : '_';
  }
  if (out.empty()) out = "kernel";
  return out + ".cu";
}

std::string temp_dir() {
  const char* t = std::getenv("TMPDIR");
  return (t && *t) ? t : "/tmp";
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

// Writes the whole failing source where a person can open it; line numbers match the log, and
// the options follow as a trailing comment. Returns "" if it could not be written.
std::string dump_failed_source(const KernelSource& src, const std::vector<std::string>& options) {
  Sha256 h;
  h.update(src.name);
  h.update("\n", 1);
  h.update(src.code);
  for (const auto& o : options) {
    h.update("\n", 1);
    h.update(o);
  }
  const std::string path = temp_dir() + "/mamba3-jit-failed-" + h.hex_digest().substr(0, 16) + ".cu";
  const std::string tmp = path + ".tmp." + std::to_string(getpid()) + "." +
                          std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return "";
    out << src.code;
    if (!src.code.empty() && src.code.back() != '\n') out << '\n';
    out << "// ---- mamba3-jit: kernel '" << src.name << "', NVRTC options:\n";
    for (const auto& o : options) out << "//   " << o << '\n';
    if (!out.flush()) {
      std::remove(tmp.c_str());
      return "";
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return "";
  }
  return path;
}

// Parses "FILE(LINE): error ..." and "FILE(LINE): catastrophic error ...". Hand-written rather
// than std::regex: libtorch exports std::regex instantiations built by another compiler, and
// inside the torch extension those interpose ours and crash.
bool parse_error_line(const std::string& line, std::string* file, long* lineno) {
  std::size_t close = line.find("): ");
  while (close != std::string::npos) {
    const std::string rest = line.substr(close + 3);
    if (rest.rfind("error", 0) == 0 || rest.rfind("catastrophic error", 0) == 0) break;
    close = line.find("): ", close + 1);
  }
  if (close == std::string::npos) return false;
  const std::size_t open = line.rfind('(', close);
  if (open == std::string::npos || open + 1 == close) return false;
  const std::string digits = line.substr(open + 1, close - open - 1);
  if (digits.find_first_not_of("0123456789") != std::string::npos) return false;
  *file = line.substr(0, open);
  *lineno = std::stol(digits);
  return true;
}

// A numbered excerpt (3 lines either side, the error line marked) for every "file(LINE): error"
// of the log whose file is the program or an embedded header.
std::string error_excerpts(const std::string& log, const std::string& program_name,
                           const std::string& code) {
  std::set<std::pair<std::string, long>> seen;
  std::string out;
  int shown = 0;
  for (const auto& line : split_lines(log)) {
    std::string file;
    long lineno = 0;
    if (!parse_error_line(line, &file, &lineno)) continue;
    if (!seen.insert({file, lineno}).second) continue;
    const std::string* text = nullptr;
    if (file == program_name) {
      text = &code;
    } else {
      for (const auto& [name, content] : embedded_headers()) {
        if (file == name) text = &content;
      }
    }
    if (!text) continue;
    if (++shown > 20) {
      out += "(further errors not excerpted)\n";
      break;
    }
    const auto lines = split_lines(*text);
    out += "--> " + file + ":" + std::to_string(lineno) + "\n";
    const long first = std::max(1L, lineno - 3);
    const long last = std::min(static_cast<long>(lines.size()), lineno + 3);
    char buf[32];
    for (long i = first; i <= last; ++i) {
      std::snprintf(buf, sizeof(buf), "%s%5ld | ", i == lineno ? ">" : " ", i);
      out += buf + lines[static_cast<std::size_t>(i - 1)] + "\n";
    }
  }
  return out;
}

}  // namespace

std::string resolve_arch(const std::string& arch) {
  if (arch.empty()) return default_arch();
  // sm_<digits> with an optional one-letter suffix.
  const std::size_t digits_end = arch.find_first_not_of("0123456789", 3);
  const bool well_formed = arch.rfind("sm_", 0) == 0 && arch.size() > 3 && digits_end != 3 &&
                           (digits_end == std::string::npos ||
                            (digits_end + 1 == arch.size() && arch[digits_end] >= 'a' && arch[digits_end] <= 'z'));
  if (!well_formed) {
    throw JitError("unsupported architecture '" + arch +
                   "': expected sm_XY with an optional suffix, e.g. sm_90a");
  }
  return arch;
}

std::vector<std::string> normalize_options(const std::vector<std::string>& options) {
  std::vector<std::string> out;
  out.reserve(options.size());
  for (const auto& o : options) {
    const auto b = o.find_first_not_of(" \t\r\n\f\v");
    if (b == std::string::npos) continue;
    const auto e = o.find_last_not_of(" \t\r\n\f\v");
    out.push_back(o.substr(b, e - b + 1));
  }
  return out;
}

std::vector<std::string> builtin_options(const std::string& arch) {
  // -default-device: kernel_src headers are shared with the host dispatcher, so they hold plain
  // (unannotated) C++ functions, which NVRTC otherwise refuses as host code. No fast-math: the
  // kernels are checked against a float reference.
  std::vector<std::string> options{"-std=c++17", "--gpu-architecture=" + arch, "-default-device"};
  // Source lines in the cubin, for profilers (ncu's source view, nvdisasm -g). Part of the cache
  // key through these options, so such kernels never mix with the plain ones.
  if (const char* v = std::getenv("MAMBA3_JIT_LINEINFO"); v && std::string(v) == "1") {
    options.push_back("-lineinfo");
  }
  return options;
}

const std::string& nvrtc_version() {
  static const std::string v = [] {
    int major = 0, minor = 0;
    const nvrtcResult r = nvrtcVersion(&major, &minor);
    if (r != NVRTC_SUCCESS) {
      throw NvrtcError(std::string("nvrtcVersion failed: ") + nvrtcGetErrorString(r), "", "");
    }
    return std::to_string(major) + "." + std::to_string(minor);
  }();
  return v;
}

std::string lines_containing(const std::string& text, const std::string& needle) {
  std::string out;
  for (const auto& line : split_lines(text)) {
    if (line.find(needle) != std::string::npos) out += (out.empty() ? "" : "\n") + line;
  }
  return out;
}

CompileOutput compile_with_nvrtc(const KernelSource& src) {
  const auto start = std::chrono::steady_clock::now();
  const std::string arch = resolve_arch(src.arch);
  CompileOutput result;
  result.options = builtin_options(arch);
  for (auto& o : cuda_include_options()) result.options.push_back(std::move(o));
  for (auto& o : normalize_options(src.options)) result.options.push_back(std::move(o));

  const auto& headers = embedded_headers();
  std::vector<const char*> header_texts, header_names;
  for (const auto& [name, content] : headers) {
    header_names.push_back(name.c_str());
    header_texts.push_back(content.c_str());
  }
  const std::string program_name = program_file_name(src.name);

  Program p;
  check_nvrtc(nvrtcCreateProgram(&p.prog, src.code.c_str(), program_name.c_str(),
                                 static_cast<int>(headers.size()), header_texts.data(),
                                 header_names.data()),
              "nvrtcCreateProgram", src.name);

  std::vector<const char*> argv;
  for (const auto& o : result.options) argv.push_back(o.c_str());
  const nvrtcResult compiled =
      nvrtcCompileProgram(p.prog, static_cast<int>(argv.size()), argv.data());

  std::size_t log_size = 0;
  check_nvrtc(nvrtcGetProgramLogSize(p.prog, &log_size), "nvrtcGetProgramLogSize", src.name);
  std::string log(log_size, '\0');
  if (log_size > 0) {
    check_nvrtc(nvrtcGetProgramLog(p.prog, log.data()), "nvrtcGetProgramLog", src.name);
  }
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();

  if (compiled != NVRTC_SUCCESS) {
    const std::string path = dump_failed_source(src, result.options);
    std::string what = "NVRTC could not compile kernel '" + src.name + "' for " + arch +
                       " (nvrtcCompileProgram: " + nvrtcGetErrorString(compiled) + ")\n";
    what += "options: " + join(result.options, " ") + "\n";
    what += "log:\n" + (log.empty() ? std::string("(empty)") : log) + "\n";
    const std::string excerpts = error_excerpts(log, program_name, src.code);
    if (!excerpts.empty()) what += "source:\n" + excerpts;
    what += "full source: " + (path.empty() ? std::string("(could not be written)") : path);
    throw NvrtcError(what, log, path);
  }
  if (!log.empty()) logger().debug("NVRTC log for {}:\n{}", src.name, log);
  // ptxas reports a serialized warpgroup product (and similar losses) only as an info line of a
  // successful compile: it costs the kernel its overlap of products without failing anything, so
  // it is said at warning level, with the lines that name it.
  const std::string losses = lines_containing(log, "Potential Performance Loss");
  if (!losses.empty()) logger().warn("ptxas reports a performance loss in {}:\n{}", src.name, losses);

  std::size_t cubin_size = 0;
  check_nvrtc(nvrtcGetCUBINSize(p.prog, &cubin_size), "nvrtcGetCUBINSize", src.name);
  result.cubin.resize(cubin_size);
  check_nvrtc(nvrtcGetCUBIN(p.prog, result.cubin.data()), "nvrtcGetCUBIN", src.name);
  result.log = std::move(log);
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace mamba3_jit
