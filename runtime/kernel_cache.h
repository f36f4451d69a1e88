// The on-disk layout of KernelCache and the maintenance operations on a cache directory (used by
// mamba3-jit-cache and the tests).
//
// Layout of a cache directory:
//   <key>.cubin            the binary
//   <key>.json             its manifest; its presence marks a complete entry, its mtime is the
//                          entry's last use (touched on every disk hit)
//   .tmp.<host>.<pid>.<tid>.<random>.{cubin,json}
//                          files being written; renamed into place when complete
//   quarantine/            entries found corrupt, moved aside for inspection
//
// <key> is the hex SHA-256 of, length-prefixed: the format version below, the NVRTC version,
// the architecture, the built-in options, the normalised source options (see
// normalize_options()), the digest of every embedded header (name and bytes) and the source.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mamba3_jit {

// Bumped whenever the key material, the built-in options or the entry layout change, so that
// old entries are simply never looked up again.
inline constexpr int kCacheFormatVersion = 1;

struct CacheEntryInfo {
  std::string key;
  std::uint64_t bytes = 0;        // cubin plus manifest on disk
  std::int64_t last_used_ns = 0;  // the manifest's mtime, nanoseconds since the epoch
};

// Complete entries of `dir` (those with a manifest), oldest use first. Does not verify them.
std::vector<CacheEntryInfo> list_entries(const std::string& dir);

// "" when the entry's manifest parses, belongs to `key`, has this format version, and the cubin
// has the recorded size and SHA-256; otherwise why not.
std::string verify_entry(const std::string& dir, const std::string& key);

struct CacheStats {
  std::size_t entries = 0;
  std::uint64_t entry_bytes = 0;
  std::size_t temp_files = 0;        // writes in progress or left by killed writers
  std::size_t stale_temp_files = 0;  // of those, the ones prune() would remove
  std::size_t orphan_cubins = 0;     // cubins without manifest
  std::size_t quarantined_files = 0;
  std::uint64_t quarantined_bytes = 0;
};
CacheStats stat_cache(const std::string& dir);

// A temporary file whose writer is gone: older than an hour, or written on this host by a
// process that no longer exists. Anything else might still be renamed into place.
bool is_stale_temp_file(const std::string& path);

struct PruneResult {
  std::size_t entries_removed = 0;
  std::uint64_t bytes_removed = 0;
  std::size_t temp_files_removed = 0;
  std::size_t orphans_removed = 0;
  std::size_t quarantined_removed = 0;
  std::size_t entries_left = 0;
  std::uint64_t bytes_left = 0;
};
// Evicts least recently used entries until the entries total at most max_bytes, and removes
// stale temporary files, cubins orphaned for over an hour and the quarantine.
PruneResult prune(const std::string& dir, std::uint64_t max_bytes);

}  // namespace mamba3_jit
