#include "cache/disk_cache.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "cache/entry_format.h"
#include "cache/posix_io.h"
#include "ejk/core/error.h"
#include "util/hash.h"

namespace ejk::cache {
namespace fs = std::filesystem;
namespace {

constexpr size_t kFileHashChars = 16;
constexpr const char* kEntrySuffix = ".bin";
constexpr const char* kLockSuffix = ".lock";
// Temp files younger than this may belong to a writer that is still running.
constexpr auto kStaleTempAge = std::chrono::minutes(10);
// Keeps "<key>-<hash16>.bin.tmp.<pid>.<random>" under the usual 255-byte name limit.
constexpr size_t kMaxKeyLength = 200;

const char* nonempty_env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

bool is_name_char(char c, bool allow_dot_dash) {
  if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_') return true;
  if (!allow_dot_dash) return false;
  return (c >= 'A' && c <= 'Z') || c == '.' || c == '-';
}

void check_backend(const std::string& backend) {
  bool ok = !backend.empty() && std::all_of(backend.begin(), backend.end(),
                                            [](char c) { return is_name_char(c, false); });
  if (!ok)
    throw InvalidArgument(fmt::format(
        "cache backend \"{}\": expected a non-empty name of [a-z0-9_] such as \"cpu\"", backend));
}

void check_key(const std::string& key) {
  bool ok = !key.empty() && key.size() <= kMaxKeyLength && key.front() != '.' &&
            std::all_of(key.begin(), key.end(), [](char c) { return is_name_char(c, true); });
  if (!ok)
    throw InvalidArgument(fmt::format(
        "cache key \"{}\": expected 1-{} characters of [A-Za-z0-9._-], not starting with '.'",
        key, kMaxKeyLength));
}

void check_hash(const std::string& hash_hex) {
  if (hash_hex.size() < kFileHashChars || hash_hex.size() > 128 || !util::is_lower_hex(hash_hex))
    throw InvalidArgument(fmt::format(
        "cache hash \"{}\": expected 16-128 lowercase hex characters (e.g. from "
        "util::hash_strings_hex)",
        hash_hex));
}

bool ends_with(const std::string& s, const char* suffix) { return s.ends_with(suffix); }

// "<key>-<hash16>.bin" -> {key, hash16}; the key may itself contain '-'.
bool split_entry_name(const std::string& file_name, std::string& key, std::string& hash_prefix) {
  std::string stem = file_name.substr(0, file_name.size() - std::strlen(kEntrySuffix));
  size_t dash = stem.rfind('-');
  if (dash == std::string::npos || dash == 0) return false;
  key = stem.substr(0, dash);
  hash_prefix = stem.substr(dash + 1);
  return hash_prefix.size() == kFileHashChars && util::is_lower_hex(hash_prefix);
}

EntryInfo inspect_entry(const fs::path& path, const std::string& backend, bool verify) {
  EntryInfo info;
  info.backend = backend;
  info.path = path;
  EntryExpectation expect;
  expect.backend = backend;
  if (!split_entry_name(path.filename().string(), info.key, expect.hash_prefix)) {
    std::error_code ec;
    uintmax_t size = fs::file_size(path, ec);
    info.size = ec ? 0 : size;
    info.problem = "file name is not <key>-<16 hex>.bin";
    return info;
  }
  expect.key = info.key;
  std::optional<io::FileBytes> file;
  try {
    file = io::read_file(path, verify ? std::numeric_limits<size_t>::max() : kMaxHeaderSize);
  } catch (const Error& e) {  // an unreadable entry is listed with the reason, not fatal
    info.problem = e.what();
    return info;
  }
  if (!file) {
    info.problem = "removed while listing";
    return info;
  }
  info.size = file->size;
  std::optional<EntryHeader> header = decode_header(file->bytes, info.problem);
  if (!header) return info;
  info.hash_hex = header->hash_hex;
  info.problem = check_header(*header, expect, file->size);
  if (info.problem.empty() && verify) info.problem = check_payload(*header, file->bytes);
  info.valid = info.problem.empty();
  return info;
}

std::vector<fs::path> backend_dirs(const fs::path& root) {
  std::vector<fs::path> dirs;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return dirs;
  for (const auto& entry : fs::directory_iterator(root, ec))
    if (entry.is_directory(ec)) dirs.push_back(entry.path());
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.is_regular_file(ec)) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

bool is_stale(const fs::path& path) {
  std::error_code ec;
  auto written = fs::last_write_time(path, ec);
  return !ec && fs::file_time_type::clock::now() - written > kStaleTempAge;
}

}  // namespace

fs::path default_root() {
  fs::path base;
  if (const char* dir = nonempty_env("EJK_CACHE_DIR")) {
    base = dir;
  } else if (const char* xdg = nonempty_env("XDG_CACHE_HOME"); xdg && fs::path(xdg).is_absolute()) {
    // The XDG spec says relative values are invalid and must be ignored.
    base = fs::path(xdg) / "ejkernel";
  } else if (const char* home = nonempty_env("HOME")) {
    base = fs::path(home) / ".cache" / "ejkernel";
  } else {
    base = fs::temp_directory_path() / fmt::format("ejkernel-{}", ::getuid());
  }
  return base / fmt::format("v{}", kFormatVersion);
}

DiskCache::DiskCache(fs::path root) : root_(std::move(root)) {
  if (root_.empty())
    throw InvalidArgument("DiskCache root: expected a directory path, got an empty path");
}

fs::path DiskCache::entry_path(const std::string& backend, const std::string& key,
                               const std::string& hash_hex) const {
  check_backend(backend);
  check_key(key);
  check_hash(hash_hex);
  return root_ / backend / fmt::format("{}-{}{}", key, hash_hex.substr(0, kFileHashChars),
                                       kEntrySuffix);
}

std::optional<std::vector<uint8_t>> DiskCache::load(const std::string& backend,
                                                    const std::string& key,
                                                    const std::string& hash_hex) {
  fs::path path = entry_path(backend, key, hash_hex);
  std::optional<io::FileBytes> file = io::read_file(path);
  if (!file) return std::nullopt;
  std::string problem;
  std::optional<EntryHeader> header = decode_header(file->bytes, problem);
  if (header) problem = check_header(*header, {backend, key, hash_hex, ""}, file->size);
  if (problem.empty()) problem = check_payload(*header, file->bytes);
  if (!problem.empty()) {
    io::remove_if_same_file(path, file->device, file->inode);
    return std::nullopt;
  }
  std::vector<uint8_t> payload = std::move(file->bytes);
  payload.erase(payload.begin(), payload.begin() + static_cast<std::ptrdiff_t>(header->header_size));
  return payload;
}

void DiskCache::store(const std::string& backend, const std::string& key,
                      const std::string& hash_hex, std::span<const uint8_t> payload) {
  fs::path path = entry_path(backend, key, hash_hex);
  io::write_file_atomic(path, encode_entry(backend, key, hash_hex, payload));
}

std::vector<EntryInfo> DiskCache::list(bool verify) const {
  std::vector<EntryInfo> out;
  for (const fs::path& dir : backend_dirs(root_)) {
    std::string backend = dir.filename().string();
    for (const fs::path& file : files_in(dir)) {
      std::string name = file.filename().string();
      if (!ends_with(name, kEntrySuffix) || io::is_temp_file_name(name)) continue;
      out.push_back(inspect_entry(file, backend, verify));
    }
  }
  return out;
}

size_t DiskCache::clear() {
  size_t removed = 0;
  for (const fs::path& dir : backend_dirs(root_)) {
    for (const fs::path& file : files_in(dir)) {
      std::string name = file.filename().string();
      std::error_code ec;
      if (io::is_temp_file_name(name)) {
        if (is_stale(file)) fs::remove(file, ec);
      } else if (ends_with(name, kEntrySuffix)) {
        if (fs::remove(file, ec)) ++removed;
      } else if (ends_with(name, kLockSuffix)) {
        // Only unheld locks: removing a held one would let a second builder start.
        if (auto held = EntryLock::try_acquire(file)) held->remove_file();
      }
    }
  }
  return removed;
}

EntryLock DiskCache::lock(const std::string& backend, const std::string& key,
                          const std::string& hash_hex) {
  fs::path lock_path = entry_path(backend, key, hash_hex);
  lock_path.replace_extension(kLockSuffix);
  return EntryLock::acquire(lock_path);
}

}  // namespace ejk::cache
