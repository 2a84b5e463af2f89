#include "cache/disk_cache.h"

#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "cache/entry_format.h"
#include "cache/entry_names.h"
#include "cache/posix_io.h"
#include "cache/temp_files.h"
#include "cache/trust.h"
#include "ejk/core/error.h"
#include "util/env.h"

namespace ejk::cache {
namespace fs = std::filesystem;
namespace {

constexpr const char* kLockSuffix = ".lock";
constexpr int64_t kMaxLockTimeoutS = 86400;
constexpr int64_t kDefaultLockTimeoutS = 60;

// $TMPDIR/ejkernel-<uid>: the root of last resort, private to this user. TMPDIR is taken as
// given (no existence check here): a bad one makes the cache unusable, not the process fail.
fs::path private_fallback_base() {
  fs::path tmp = util::env_path("TMPDIR").value_or(fs::path("/tmp"));
  return tmp / fmt::format("ejkernel-{}", ::geteuid());
}

// Absolute, normal, without a trailing separator: the trust checks compare paths.
fs::path normal_root(const fs::path& root) {
  if (root.empty())
    throw InvalidArgument("DiskCache root: expected a directory path, got an empty path");
  std::error_code ec;
  fs::path absolute = fs::absolute(root, ec);
  if (ec)
    throw InvalidArgument(fmt::format("DiskCache root '{}': cannot make it absolute: {}",
                                      root.string(), ec.message()));
  fs::path out = absolute.lexically_normal();
  return out.has_filename() ? out : out.parent_path();
}

}  // namespace

fs::path default_root() {
  fs::path base;
  std::optional<std::string> xdg = util::env_string("XDG_CACHE_HOME");
  if (auto dir = util::env_path("EJK_CACHE_DIR")) {
    base = *dir;
  } else if (xdg && fs::path(*xdg).is_absolute()) {
    // The XDG spec says relative values are invalid and must be ignored.
    base = fs::path(*xdg) / "ejkernel";
  } else if (auto home = util::env_path("HOME")) {
    base = *home / ".cache" / "ejkernel";
  } else {
    base = private_fallback_base();
  }
  return base / fmt::format("v{}", kFormatVersion);
}

std::chrono::milliseconds lock_timeout() {
  return std::chrono::seconds(
      util::env_int("EJK_CACHE_LOCK_TIMEOUT_S", 0, kMaxLockTimeoutS, kDefaultLockTimeoutS));
}

DiskCache::DiskCache() : DiskCache(default_root()) {
  if (root_.parent_path() == normal_root(private_fallback_base())) dir_mode_ = 0700;
}

DiskCache::DiskCache(fs::path root) : root_(normal_root(root)) {}

std::optional<std::string> DiskCache::unusable(const std::string& backend) const {
  if (!backend.empty()) names::check_backend(backend);
  return trust::check_tree(root_, backend);
}

bool DiskCache::read_only() const {
  std::error_code ec;
  return fs::is_directory(root_, ec) && ::access(root_.c_str(), W_OK | X_OK) != 0;
}

void DiskCache::ensure_directories(const std::string& backend) const {
  trust::ensure_tree(root_, backend, dir_mode_);
}

fs::path DiskCache::entry_path(const std::string& backend, const std::string& key,
                               const std::string& hash_hex) const {
  names::check_backend(backend);
  names::check_key(key);
  names::check_hash(hash_hex);
  return root_ / backend / names::entry_file_name(key, hash_hex);
}

Lookup DiskCache::lookup(const std::string& backend, const std::string& key,
                         const std::string& hash_hex, const PayloadCheck& check) {
  fs::path path = entry_path(backend, key, hash_hex);
  if (auto why = unusable(backend)) throw Error(fmt::format("cache: {}", *why));
  std::optional<io::FileBytes> file = io::read_file(path);
  if (!file) return {};
  std::string problem = file->untrusted.value_or("");
  std::optional<EntryHeader> header;
  if (problem.empty()) header = decode_header(file->bytes, problem);
  if (header) problem = check_header(*header, {backend, key, hash_hex, ""}, file->size);
  if (problem.empty()) problem = check_payload(*header, file->bytes);
  auto payload = header ? std::span<const uint8_t>(file->bytes).subspan(
                              std::min(header->header_size, file->bytes.size()))
                        : std::span<const uint8_t>();
  if (problem.empty() && check) problem = check(payload).value_or("");
  if (!problem.empty()) {
    io::remove_if_same_file(path, file->device, file->inode);
    return {std::nullopt, problem};
  }
  return {std::vector<uint8_t>(payload.begin(), payload.end()), ""};
}

std::string DiskCache::store(const std::string& backend, const std::string& key,
                             const std::string& hash_hex, std::span<const uint8_t> payload) {
  fs::path path = entry_path(backend, key, hash_hex);
  ensure_directories(backend);
  temps::remove_stale(path.parent_path());
  return io::write_file_atomic(path, encode_entry(backend, key, hash_hex, payload));
}

bool DiskCache::remove_entry(const std::string& backend, const std::string& key,
                             const std::string& hash_hex) {
  fs::path path = entry_path(backend, key, hash_hex);
  if (auto why = unusable(backend)) throw Error(fmt::format("cache: {}", *why));
  return ::unlink(path.c_str()) == 0;
}

std::optional<EntryLock> DiskCache::lock_for(const std::string& backend, const std::string& key,
                                             const std::string& hash_hex,
                                             std::chrono::milliseconds timeout) {
  fs::path lock_path = entry_path(backend, key, hash_hex);
  lock_path.replace_extension(kLockSuffix);
  ensure_directories(backend);
  return EntryLock::acquire_for(lock_path, timeout);
}

EntryLock DiskCache::lock(const std::string& backend, const std::string& key,
                          const std::string& hash_hex) {
  const std::chrono::milliseconds timeout = lock_timeout();
  if (auto held = lock_for(backend, key, hash_hex, timeout)) return std::move(*held);
  throw Error(fmt::format("cache: timed out after {} s waiting for the lock of {}",
                          timeout.count() / 1000, key));
}

}  // namespace ejk::cache
