#include "kernel_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>

#include "embedded_headers.h"
#include "jit.h"
#include "logging.h"
#include "nvrtc_compiler.h"
#include "sha256.h"

#ifndef MAMBA3_JIT_VERSION
#define MAMBA3_JIT_VERSION "unknown"
#endif

namespace mamba3_jit {
namespace {

constexpr const char* kTempPrefix = ".tmp.";
constexpr const char* kQuarantine = "quarantine";
constexpr std::int64_t kStaleSeconds = 3600;

// ---- files ---------------------------------------------------------------------------------

std::string errno_text(int err) { return std::strerror(err); }

// 0 on success, else the errno.
int read_file(const std::string& path, std::string* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  out->clear();
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return err;
    }
    if (n == 0) break;
    out->append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return 0;
}

// Creates `path` (which must not exist), writes `data` and fsyncs, so that a later rename
// publishes complete contents even across a crash. "" on success, else why not.
std::string write_new_file_synced(const std::string& path, const std::string& data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return "open(" + path + "): " + errno_text(errno);
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string err = "write(" + path + "): " + errno_text(errno);
      ::close(fd);
      ::unlink(path.c_str());
      return err;
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const std::string err = "fsync(" + path + "): " + errno_text(errno);
    ::close(fd);
    ::unlink(path.c_str());
    return err;
  }
  if (::close(fd) != 0) {
    const std::string err = "close(" + path + "): " + errno_text(errno);
    ::unlink(path.c_str());
    return err;
  }
  return "";
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);  // best effort: the entry is valid either way, only its durability differs
  ::close(fd);
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return names;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  return names;
}

std::int64_t mtime_ns(const struct stat& st) {
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool is_key(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "<key>" when `name` is "<key><ext>".
std::optional<std::string> key_of(const std::string& name, const std::string& ext) {
  if (!ends_with(name, ext)) return std::nullopt;
  std::string key = name.substr(0, name.size() - ext.size());
  if (!is_key(key)) return std::nullopt;
  return key;
}

std::string manifest_path(const std::string& dir, const std::string& key) {
  return dir + "/" + key + ".json";
}
std::string cubin_path(const std::string& dir, const std::string& key) {
  return dir + "/" + key + ".cubin";
}

// ---- temporary file names --------------------------------------------------------------------

const std::string& host_tag() {
  static const std::string tag = [] {
    char buf[256] = {};
    if (::gethostname(buf, sizeof(buf) - 1) != 0) return std::string("unknown");
    std::string out;
    for (const char* p = buf; *p; ++p) {
      const bool plain = std::isalnum(static_cast<unsigned char>(*p)) || *p == '-' || *p == '_';
      out += plain ? *p : '_';
    }
    return out.empty() ? std::string("unknown") : out;
  }();
  return tag;
}

// ".tmp.<host>.<pid>.<tid>.<random>": the pid and host let prune() tell a dead writer's file
// from a live one; the random part keeps forked children (same tid numbering) apart.
std::string temp_base() {
  thread_local std::mt19937_64 rng = [] {
    std::seed_seq seq{static_cast<std::uint64_t>(now_ns()), static_cast<std::uint64_t>(::getpid()),
                      static_cast<std::uint64_t>(::syscall(SYS_gettid)),
                      static_cast<std::uint64_t>(std::random_device{}())};
    return std::mt19937_64(seq);
  }();
  char rand_hex[17];
  std::snprintf(rand_hex, sizeof(rand_hex), "%016llx", static_cast<unsigned long long>(rng()));
  return std::string(kTempPrefix) + host_tag() + "." + std::to_string(::getpid()) + "." +
         std::to_string(::syscall(SYS_gettid)) + "." + rand_hex;
}

// ---- manifest --------------------------------------------------------------------------------

struct Manifest {
  long long format_version = 0;
  std::string key;
  std::string name;
  std::string arch;
  std::vector<std::string> options;
  std::string nvrtc_version;
  long long cubin_size = -1;
  std::string cubin_sha256;
  long long created = 0;
  std::string runtime_version;
};

void json_string(std::string* out, const std::string& s) {
  *out += '"';
  for (const char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\t': *out += "\\t"; break;
      case '\r': *out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
          *out += buf;
        } else {
          *out += c;
        }
    }
  }
  *out += '"';
}

std::string to_json(const Manifest& m) {
  std::string out = "{\n";
  auto str = [&](const char* k, const std::string& v, bool last = false) {
    out += "  \"";
    out += k;
    out += "\": ";
    json_string(&out, v);
    out += last ? "\n" : ",\n";
  };
  auto num = [&](const char* k, long long v) {
    out += "  \"";
    out += k;
    out += "\": " + std::to_string(v) + ",\n";
  };
  num("format_version", m.format_version);
  str("key", m.key);
  str("name", m.name);
  str("arch", m.arch);
  out += "  \"options\": [";
  for (std::size_t i = 0; i < m.options.size(); ++i) {
    if (i) out += ", ";
    json_string(&out, m.options[i]);
  }
  out += "],\n";
  str("nvrtc_version", m.nvrtc_version);
  num("cubin_size", m.cubin_size);
  str("cubin_sha256", m.cubin_sha256);
  num("created", m.created);
  str("runtime_version", m.runtime_version, true);
  out += "}\n";
  return out;
}

// Reads exactly the flat object to_json() writes: string, integer and string-array values.
class ManifestParser {
 public:
  explicit ManifestParser(const std::string& text) : s_(text) {}

  // "" on success, else what is wrong.
  std::string parse(Manifest* m) {
    skip_ws();
    if (!eat('{')) return fail("expected '{'");
    skip_ws();
    if (eat('}')) return finish();
    for (;;) {
      std::string name;
      skip_ws();
      if (!string(&name)) return fail("expected a field name");
      skip_ws();
      if (!eat(':')) return fail("expected ':'");
      skip_ws();
      bool ok = false;
      if (name == "format_version") ok = integer(&m->format_version);
      else if (name == "key") ok = string(&m->key);
      else if (name == "name") ok = string(&m->name);
      else if (name == "arch") ok = string(&m->arch);
      else if (name == "options") ok = string_array(&m->options);
      else if (name == "nvrtc_version") ok = string(&m->nvrtc_version);
      else if (name == "cubin_size") ok = integer(&m->cubin_size);
      else if (name == "cubin_sha256") ok = string(&m->cubin_sha256);
      else if (name == "created") ok = integer(&m->created);
      else if (name == "runtime_version") ok = string(&m->runtime_version);
      else return fail("unknown field '" + name + "'");
      if (!ok) return fail("bad value for '" + name + "'");
      skip_ws();
      if (eat(',')) continue;
      if (eat('}')) return finish();
      return fail("expected ',' or '}'");
    }
  }

 private:
  std::string finish() {
    skip_ws();
    return pos_ == s_.size() ? "" : fail("trailing data");
  }
  std::string fail(const std::string& what) const {
    return what + " at byte " + std::to_string(pos_);
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t' ||
                                s_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool eat(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool integer(long long* out) {
    const std::size_t start = pos_;
    if (eat('-')) {
    }
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    const std::string digits = s_.substr(start, pos_ - start);
    if (digits.empty() || digits == "-" || digits.size() > 19) return false;
    // A damaged manifest can hold a number past the range of long long; std::stoll would throw
    // out of check_entry instead of letting the entry be judged corrupt.
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(digits.c_str(), &end, 10);
    if (errno == ERANGE || !end || *end != '\0') return false;
    *out = v;
    return true;
  }
  bool string(std::string* out) {
    if (!eat('"')) return false;
    out->clear();
    while (pos_ < s_.size()) {
      const char c = s_[pos_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c != '\\') {
        *out += c;
        continue;
      }
      if (pos_ >= s_.size()) return false;
      const char e = s_[pos_++];
      switch (e) {
        case '"': *out += '"'; break;
        case '\\': *out += '\\'; break;
        case '/': *out += '/'; break;
        case 'n': *out += '\n'; break;
        case 't': *out += '\t'; break;
        case 'r': *out += '\r'; break;
        case 'b': *out += '\b'; break;
        case 'f': *out += '\f'; break;
        case 'u': {
          // Only the control characters to_json() escapes are expected here.
          if (pos_ + 4 > s_.size()) return false;
          unsigned v = 0;
          for (int i = 0; i < 4; ++i) {
            const char h = s_[pos_++];
            v <<= 4;
            if (h >= '0' && h <= '9') v |= unsigned(h - '0');
            else if (h >= 'a' && h <= 'f') v |= unsigned(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F') v |= unsigned(h - 'A' + 10);
            else return false;
          }
          if (v >= 0x80) return false;
          *out += static_cast<char>(v);
          break;
        }
        default:
          return false;
      }
    }
    return false;
  }
  bool string_array(std::vector<std::string>* out) {
    out->clear();
    if (!eat('[')) return false;
    skip_ws();
    if (eat(']')) return true;
    for (;;) {
      std::string item;
      skip_ws();
      if (!string(&item)) return false;
      out->push_back(std::move(item));
      skip_ws();
      if (eat(',')) continue;
      return eat(']');
    }
  }

  const std::string& s_;
  std::size_t pos_ = 0;
};

// ---- entries ---------------------------------------------------------------------------------

enum class EntryState { kValid, kMissing, kCorrupt };

struct EntryCheck {
  EntryState state = EntryState::kMissing;
  std::string reason;  // for kCorrupt
  std::shared_ptr<const std::string> cubin;
};

// Checks the entry of `key`; with `expected`, its manifest must also record the same key
// fields, so that a stray file copied under another key is not trusted.
EntryCheck check_entry(const std::string& dir, const std::string& key, const Manifest* expected) {
  EntryCheck c;
  auto corrupt = [&](std::string why) {
    c.state = EntryState::kCorrupt;
    c.reason = std::move(why);
    return c;
  };
  std::string text;
  const std::string mpath = manifest_path(dir, key);
  if (const int err = read_file(mpath, &text)) {
    if (err == ENOENT) return c;
    return corrupt("cannot read manifest: " + errno_text(err));
  }
  Manifest m;
  if (const std::string err = ManifestParser(text).parse(&m); !err.empty()) {
    return corrupt("manifest does not parse: " + err);
  }
  if (m.format_version != kCacheFormatVersion) {
    return corrupt("manifest has format version " + std::to_string(m.format_version) +
                   ", expected " + std::to_string(kCacheFormatVersion));
  }
  if (m.key != key) return corrupt("manifest belongs to key " + m.key);
  if (expected) {
    if (m.arch != expected->arch) return corrupt("manifest arch " + m.arch + " != " + expected->arch);
    if (m.options != expected->options) return corrupt("manifest options differ from the source's");
    if (m.nvrtc_version != expected->nvrtc_version) {
      return corrupt("manifest NVRTC version " + m.nvrtc_version + " != " + expected->nvrtc_version);
    }
  }
  auto cubin = std::make_shared<std::string>();
  if (const int err = read_file(cubin_path(dir, key), cubin.get())) {
    // A pruner removes the manifest before the cubin; if the manifest is gone too, this was
    // an eviction in progress, not damage.
    struct stat st;
    if (err == ENOENT && ::stat(mpath.c_str(), &st) != 0) return c;
    return corrupt("cannot read cubin: " + errno_text(err));
  }
  if (static_cast<long long>(cubin->size()) != m.cubin_size) {
    return corrupt("cubin has " + std::to_string(cubin->size()) + " bytes, manifest records " +
                   std::to_string(m.cubin_size));
  }
  if (sha256_hex(*cubin) != m.cubin_sha256) return corrupt("cubin SHA-256 does not match manifest");
  c.state = EntryState::kValid;
  c.cubin = std::move(cubin);
  return c;
}

// Moves the entry's files aside (manifest first, so that the entry stops counting as complete at
// once); deletes them when they cannot be moved.
void quarantine_entry(const std::string& dir, const std::string& key, const std::string& reason) {
  const std::string qdir = dir + "/" + kQuarantine;
  ::mkdir(qdir.c_str(), 0755);
  const std::string stem =
      qdir + "/" + key + "." + std::to_string(now_ns()) + "." + std::to_string(::getpid());
  for (const char* ext : {".json", ".cubin"}) {
    const std::string from = dir + "/" + key + ext;
    if (std::rename(from.c_str(), (stem + ext).c_str()) != 0 && errno != ENOENT) {
      ::unlink(from.c_str());
    }
  }
  if (FILE* f = std::fopen((stem + ".reason").c_str(), "w")) {
    std::fprintf(f, "%s\n", reason.c_str());
    std::fclose(f);
  }
}

// Cubin first, manifest last: a reader that sees the manifest finds the cubin complete. Racing
// writers of one key publish identical contents, so whichever rename lands last is fine.
std::string publish_entry(const std::string& dir, const std::string& key, const std::string& cubin,
                          const std::string& manifest) {
  const std::string base = dir + "/" + temp_base();
  const std::string tmp_cubin = base + ".cubin";
  const std::string tmp_manifest = base + ".json";
  std::string err = write_new_file_synced(tmp_cubin, cubin);
  if (err.empty()) err = write_new_file_synced(tmp_manifest, manifest);
  if (err.empty() && std::rename(tmp_cubin.c_str(), cubin_path(dir, key).c_str()) != 0) {
    err = "rename(" + tmp_cubin + "): " + errno_text(errno);
  }
  if (err.empty() && std::rename(tmp_manifest.c_str(), manifest_path(dir, key).c_str()) != 0) {
    err = "rename(" + tmp_manifest + "): " + errno_text(errno);
  }
  if (!err.empty()) {
    ::unlink(tmp_cubin.c_str());
    ::unlink(tmp_manifest.c_str());
    return err;
  }
  fsync_dir(dir);
  return "";
}

// ---- key -------------------------------------------------------------------------------------

// Length-prefixed, so that no two different inputs serialise alike.
void hash_field(Sha256* h, std::string_view tag, std::string_view value) {
  h->update(tag);
  const std::string len = " " + std::to_string(value.size()) + ":";
  h->update(len);
  h->update(value);
  h->update("\n", 1);
}

const std::string& headers_digest() {
  static const std::string digest = [] {
    Sha256 h;
    for (const auto& [name, content] : embedded_headers()) {
      hash_field(&h, "header-name", name);
      hash_field(&h, "header-content", content);
    }
    return h.hex_digest();
  }();
  return digest;
}

std::string compute_key(const std::string& code, const std::string& arch,
                        const std::vector<std::string>& options) {
  Sha256 h;
  hash_field(&h, "mamba3-jit-cache-format", std::to_string(kCacheFormatVersion));
  hash_field(&h, "nvrtc-version", nvrtc_version());
  hash_field(&h, "arch", arch);
  for (const auto& o : builtin_options(arch)) hash_field(&h, "builtin-option", o);
  for (const auto& o : options) hash_field(&h, "option", o);
  hash_field(&h, "headers", headers_digest());
  hash_field(&h, "source", code);
  return h.hex_digest();
}

std::string home_dir() {
  if (const char* home = std::getenv("HOME"); home && *home) return home;
  struct passwd pw;
  struct passwd* result = nullptr;
  char buf[4096];
  if (::getpwuid_r(::getuid(), &pw, buf, sizeof(buf), &result) == 0 && result && result->pw_dir) {
    return result->pw_dir;
  }
  return "";
}

}  // namespace

// ---- KernelCache -----------------------------------------------------------------------------

const char* to_string(CacheOutcome outcome) {
  switch (outcome) {
    case CacheOutcome::kMemoryHit: return "memory hit";
    case CacheOutcome::kDiskHit: return "disk hit";
    case CacheOutcome::kCompiled: return "compiled";
    case CacheOutcome::kRecompiledCorrupt: return "recompiled corrupt entry";
  }
  return "?";
}

struct KernelCache::Impl {
  using Binary = std::shared_ptr<const std::string>;

  std::string dir;
  bool persistent = false;
  std::atomic<bool> warned{false};
  mutable std::mutex mu;
  // A slot exists from the moment one thread starts to produce the binary; the others wait on
  // its future instead of compiling again. Failed slots are removed before their promise is
  // broken, so a ready future found here always holds a binary.
  std::unordered_map<std::string, std::shared_future<Binary>> slots;

  void warn_once(const std::string& message) {
    if (!warned.exchange(true)) logger().warn("{}", message);
  }

  Binary produce(const KernelSource& src, const std::string& key, CacheOutcome* outcome);
};

KernelCache::KernelCache(std::string dir) : impl_(std::make_unique<Impl>()) {
  impl_->dir = std::move(dir);
  if (impl_->dir.empty()) return;
  const std::string& d = impl_->dir;
  std::string err;
  std::error_code ec;
  std::filesystem::create_directories(d, ec);
  if (ec) {
    err = "cannot create it: " + ec.message();
  } else {
    // Creating the directory can succeed where writing into it does not (read-only mounts).
    const std::string probe = d + "/" + temp_base() + ".probe";
    err = write_new_file_synced(probe, "");
    ::unlink(probe.c_str());
  }
  if (!err.empty()) {
    impl_->warn_once("kernel cache directory " + d + " is unusable (" + err +
                     "); compiled kernels are kept in memory only");
    return;
  }
  impl_->persistent = true;
}

KernelCache::~KernelCache() = default;

std::string KernelCache::default_dir() {
  if (const char* d = std::getenv("MAMBA3_JIT_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x && x[0] == '/') {
    return std::string(x) + "/mamba3-jit";
  }
  const std::string home = home_dir();
  return home.empty() ? std::string() : home + "/.cache/mamba3-jit";
}

KernelCache& KernelCache::global() {
  // Never destroyed: kernels may be requested from other static destructors.
  static KernelCache* cache = new KernelCache(default_dir());
  return *cache;
}

const std::string& KernelCache::dir() const { return impl_->dir; }

bool KernelCache::persistent() const { return impl_->persistent; }

std::string KernelCache::key(const KernelSource& src) const {
  return compute_key(src.code, resolve_arch(src.arch), normalize_options(src.options));
}

KernelCache::Impl::Binary KernelCache::Impl::produce(const KernelSource& src,
                                                     const std::string& key,
                                                     CacheOutcome* outcome) {
  *outcome = CacheOutcome::kCompiled;
  Manifest expected;
  expected.format_version = kCacheFormatVersion;
  expected.key = key;
  expected.name = src.name;
  expected.arch = src.arch;
  expected.options = normalize_options(src.options);
  expected.nvrtc_version = nvrtc_version();
  expected.runtime_version = MAMBA3_JIT_VERSION;

  if (persistent) {
    EntryCheck c = check_entry(dir, key, &expected);
    // A concurrent writer may have swapped the cubin between our two reads; look once more
    // before calling it damaged.
    if (c.state == EntryState::kCorrupt) c = check_entry(dir, key, &expected);
    if (c.state == EntryState::kValid) {
      // The manifest's mtime is the entry's last use, which prune() evicts by.
      ::utimensat(AT_FDCWD, manifest_path(dir, key).c_str(), nullptr, 0);
      logger().debug("kernel {} [{}]: disk hit", src.name, key.substr(0, 16));
      *outcome = CacheOutcome::kDiskHit;
      return c.cubin;
    }
    if (c.state == EntryState::kCorrupt) {
      logger().warn("kernel cache entry {} ({}) in {} is corrupt: {}; quarantined, recompiling", key,
                    src.name, dir, c.reason);
      quarantine_entry(dir, key, c.reason);
      *outcome = CacheOutcome::kRecompiledCorrupt;
    }
  }

  CompileOutput out = compile_with_nvrtc(src);
  auto cubin = std::make_shared<const std::string>(std::move(out.cubin));
  logger().info("compiled kernel {} [{}] for {} in {:.2f}s ({})", src.name, key.substr(0, 16),
                src.arch, out.seconds, to_string(*outcome));
  if (persistent) {
    expected.cubin_size = static_cast<long long>(cubin->size());
    expected.cubin_sha256 = sha256_hex(*cubin);
    expected.created = static_cast<long long>(std::time(nullptr));
    const std::string err = publish_entry(dir, key, *cubin, to_json(expected));
    if (!err.empty()) {
      warn_once("cannot write to kernel cache directory " + dir + " (" + err +
                "); kernels not written there are kept in memory only");
    }
  }
  return cubin;
}

CacheResult KernelCache::get_or_compile(const KernelSource& src) {
  KernelSource resolved = src;
  resolved.arch = resolve_arch(src.arch);  // resolved once, so key and compile agree
  const std::string k = key(resolved);

  std::promise<Impl::Binary> promise;
  {
    std::unique_lock<std::mutex> lock(impl_->mu);
    auto it = impl_->slots.find(k);
    if (it != impl_->slots.end()) {
      auto future = it->second;
      lock.unlock();
      Impl::Binary cubin = future.get();  // rethrows the producer's error
      logger().debug("kernel {} [{}]: memory hit", src.name, k.substr(0, 16));
      return {k, std::move(cubin), CacheOutcome::kMemoryHit};
    }
    impl_->slots.emplace(k, promise.get_future().share());
  }
  try {
    CacheOutcome outcome;
    Impl::Binary cubin = impl_->produce(resolved, k, &outcome);
    promise.set_value(cubin);
    return {k, std::move(cubin), outcome};
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(impl_->mu);
      impl_->slots.erase(k);
    }
    promise.set_exception(std::current_exception());
    throw;
  }
}

bool KernelCache::contains(const KernelSource& src) const {
  KernelSource resolved = src;
  resolved.arch = resolve_arch(src.arch);
  const std::string k = key(resolved);
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->slots.find(k);
    if (it != impl_->slots.end() &&
        it->second.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      return true;
    }
  }
  if (!impl_->persistent) return false;
  Manifest expected;
  expected.arch = resolved.arch;
  expected.options = normalize_options(src.options);
  expected.nvrtc_version = nvrtc_version();
  return check_entry(impl_->dir, k, &expected).state == EntryState::kValid;
}

// ---- directory maintenance -------------------------------------------------------------------

std::vector<CacheEntryInfo> list_entries(const std::string& dir) {
  std::vector<CacheEntryInfo> out;
  for (const auto& name : list_dir(dir)) {
    const auto key = key_of(name, ".json");
    if (!key) continue;
    struct stat st;
    if (::stat((dir + "/" + name).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    CacheEntryInfo info;
    info.key = *key;
    info.bytes = static_cast<std::uint64_t>(st.st_size);
    info.last_used_ns = mtime_ns(st);
    struct stat cst;
    if (::stat(cubin_path(dir, *key).c_str(), &cst) == 0) {
      info.bytes += static_cast<std::uint64_t>(cst.st_size);
    }
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(), [](const CacheEntryInfo& a, const CacheEntryInfo& b) {
    return a.last_used_ns != b.last_used_ns ? a.last_used_ns < b.last_used_ns : a.key < b.key;
  });
  return out;
}

std::string verify_entry(const std::string& dir, const std::string& key) {
  const EntryCheck c = check_entry(dir, key, nullptr);
  switch (c.state) {
    case EntryState::kValid: return "";
    case EntryState::kMissing: return "no such entry";
    case EntryState::kCorrupt: return c.reason;
  }
  return "?";
}

bool is_stale_temp_file(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return false;
  if (now_ns() - mtime_ns(st) > kStaleSeconds * 1000000000LL) return true;
  // .tmp.<host>.<pid>.<tid>.<random>.<ext>
  const std::string name = path.substr(path.find_last_of('/') + 1);
  if (name.rfind(kTempPrefix, 0) != 0) return false;
  std::vector<std::string> parts;
  std::size_t start = std::strlen(kTempPrefix);
  for (;;) {
    const std::size_t dot = name.find('.', start);
    parts.push_back(name.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (parts.size() < 2 || parts[0] != host_tag()) return false;
  char* end = nullptr;
  const long pid = std::strtol(parts[1].c_str(), &end, 10);
  if (!end || *end != '\0' || pid <= 0) return false;
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

CacheStats stat_cache(const std::string& dir) {
  CacheStats s;
  for (const auto& e : list_entries(dir)) {
    ++s.entries;
    s.entry_bytes += e.bytes;
  }
  for (const auto& name : list_dir(dir)) {
    if (name.rfind(kTempPrefix, 0) == 0) {
      ++s.temp_files;
      if (is_stale_temp_file(dir + "/" + name)) ++s.stale_temp_files;
    } else if (const auto key = key_of(name, ".cubin")) {
      struct stat st;
      if (::stat(manifest_path(dir, *key).c_str(), &st) != 0) ++s.orphan_cubins;
    }
  }
  const std::string qdir = dir + "/" + kQuarantine;
  for (const auto& name : list_dir(qdir)) {
    struct stat st;
    if (::stat((qdir + "/" + name).c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      ++s.quarantined_files;
      s.quarantined_bytes += static_cast<std::uint64_t>(st.st_size);
    }
  }
  return s;
}

PruneResult prune(const std::string& dir, std::uint64_t max_bytes) {
  PruneResult r;
  for (const auto& name : list_dir(dir)) {
    const std::string path = dir + "/" + name;
    if (name.rfind(kTempPrefix, 0) == 0) {
      if (is_stale_temp_file(path) && ::unlink(path.c_str()) == 0) ++r.temp_files_removed;
    } else if (const auto key = key_of(name, ".cubin")) {
      // A cubin without manifest is young while its writer is between the two renames.
      struct stat mst, cst;
      if (::stat(manifest_path(dir, *key).c_str(), &mst) != 0 && ::stat(path.c_str(), &cst) == 0 &&
          now_ns() - mtime_ns(cst) > kStaleSeconds * 1000000000LL && ::unlink(path.c_str()) == 0) {
        ++r.orphans_removed;
      }
    }
  }
  const std::string qdir = dir + "/" + kQuarantine;
  for (const auto& name : list_dir(qdir)) {
    if (::unlink((qdir + "/" + name).c_str()) == 0) ++r.quarantined_removed;
  }
  ::rmdir(qdir.c_str());

  auto entries = list_entries(dir);
  std::uint64_t total = 0;
  for (const auto& e : entries) total += e.bytes;
  std::size_t left = entries.size();
  for (const auto& e : entries) {
    if (total <= max_bytes) break;
    // Manifest first: the entry stops being complete before its cubin disappears.
    ::unlink(manifest_path(dir, e.key).c_str());
    ::unlink(cubin_path(dir, e.key).c_str());
    total -= e.bytes;
    r.bytes_removed += e.bytes;
    ++r.entries_removed;
    --left;
  }
  r.entries_left = left;
  r.bytes_left = total;
  return r;
}

}  // namespace mamba3_jit
