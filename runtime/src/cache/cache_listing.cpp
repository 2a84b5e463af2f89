// DiskCache::list and DiskCache::clear: everything under the root, entries or not.
#include <sys/stat.h>
#include <unistd.h>

#include <limits>

#include <fmt/format.h>

#include "cache/disk_cache.h"
#include "cache/entry_format.h"
#include "cache/entry_names.h"
#include "cache/payload_check.h"
#include "cache/posix_io.h"
#include "cache/temp_files.h"
#include "cache/trust.h"
#include "ejk/core/error.h"
#include "util/hash.h"

namespace ejk::cache {
namespace fs = std::filesystem;
namespace {

EntryInfo other(const fs::path& path, std::string backend, std::string problem, uint64_t size = 0) {
  EntryInfo info;
  info.kind = "other";
  info.backend = std::move(backend);
  info.path = path;
  info.size = size;
  info.problem = std::move(problem);
  return info;
}

// Header (and with `verify` payload) checks of one regular file with an entry's name.
EntryInfo inspect_entry(const fs::path& path, const std::string& backend, bool verify) {
  EntryInfo info;
  info.backend = backend;
  info.path = path;
  EntryExpectation expect;
  expect.backend = backend;
  names::split_entry_name(path.filename().string(), info.key, expect.hash_prefix);
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
  if (file->untrusted) {
    info.problem = *file->untrusted;
    return info;
  }
  std::optional<EntryHeader> header = decode_header(file->bytes, info.problem);
  if (!header) return info;
  if (util::is_lower_hex(header->hash_hex)) info.hash_hex = header->hash_hex;
  info.problem = check_header(*header, expect, file->size);
  if (info.problem.empty() && verify) info.problem = check_payload(*header, file->bytes);
  if (info.problem.empty() && verify) {
    auto payload = std::span<const uint8_t>(file->bytes).subspan(header->header_size);
    info.problem = check_payload(backend, symbol_for_key(info.key), payload).value_or("");
  }
  info.valid = info.problem.empty();
  return info;
}

EntryInfo inspect_file(const fs::path& path, const std::string& backend, bool verify) {
  const std::string name = path.filename().string();
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return other(path, backend, "removed while listing");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (io::is_temp_file_name(name)) {
    EntryInfo info = other(path, backend, temps::describe(path), size);
    info.kind = "temp";
    return info;
  }
  std::string key, hash_prefix;
  if (!names::split_entry_name(name, key, hash_prefix))
    return other(path, backend, fmt::format("a {} that is not a cache file", trust::file_kind(st.st_mode)), size);
  if (!S_ISREG(st.st_mode))
    return other(path, backend, fmt::format("a {} at an entry's path", trust::file_kind(st.st_mode)), size);
  return inspect_entry(path, backend, verify);
}

bool is_regular_lock(const fs::path& path) {
  struct stat st;
  return names::is_lock_name(path.filename().string()) && ::lstat(path.c_str(), &st) == 0 &&
         S_ISREG(st.st_mode);
}

void list_backend(const fs::path& root, const std::string& backend, bool verify,
                  std::vector<EntryInfo>& out) {
  const fs::path dir = root / backend;
  if (auto why = trust::check_tree(root, backend)) {
    out.push_back(other(dir, backend, *why));
    return;
  }
  std::string error;
  auto files = io::list_directory(dir, error);
  if (!files) {
    out.push_back(other(dir, backend, error));
    return;
  }
  for (const std::string& name : *files)
    if (!is_regular_lock(dir / name)) out.push_back(inspect_file(dir / name, backend, verify));
}

bool is_real_directory(const fs::path& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Removes one backend directory's entries, stale temp files and unheld locks.
size_t clear_backend(const fs::path& dir) {
  size_t removed = 0;
  std::string error;
  for (const std::string& name : io::list_directory(dir, error).value_or(std::vector<std::string>{})) {
    const fs::path path = dir / name;
    std::string key, hash_prefix;
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) continue;
    const bool entry_name = names::split_entry_name(name, key, hash_prefix);
    if (entry_name && S_ISDIR(st.st_mode)) {
      // A directory where an entry belongs would block that entry's store forever.
      std::error_code ec;
      removed += fs::remove_all(path, ec) > 0 && !ec;
      continue;
    }
    if (entry_name) {
      // Regular files, and a FIFO or symlink at an entry's path (the link itself, never its target).
      removed += ::unlink(path.c_str()) == 0;
    } else if (!S_ISREG(st.st_mode)) {
      continue;
    } else if (names::is_lock_name(name)) {
      // Only unheld locks: removing a held one would let a second builder start.
      if (auto held = EntryLock::try_acquire(path)) held->remove_file();
    }
  }
  temps::remove_stale(dir);
  return removed;
}

}  // namespace

std::vector<EntryInfo> DiskCache::list(bool verify) const {
  if (auto why = unusable()) {
    EntryInfo root = other(root_, "", *why);
    root.kind = "root";
    return {root};
  }
  if (!is_real_directory(root_)) return {};
  std::vector<EntryInfo> out;
  std::string error;
  auto children = io::list_directory(root_, error);
  if (!children) return {other(root_, "", error)};
  for (const std::string& name : *children) {
    if (names::is_backend_name(name) && is_real_directory(root_ / name))
      list_backend(root_, name, verify, out);
    else
      out.push_back(other(root_ / name, "", "not a backend directory"));
  }
  return out;
}

size_t DiskCache::clear() {
  if (auto why = unusable()) throw Error(fmt::format("cache: not clearing: {}", *why));
  size_t removed = 0;
  std::string error;
  for (const std::string& name : io::list_directory(root_, error).value_or(std::vector<std::string>{})) {
    if (!names::is_backend_name(name) || !is_real_directory(root_ / name)) continue;
    if (trust::check_tree(root_, name)) continue;  // not ours to clean
    removed += clear_backend(root_ / name);
  }
  return removed;
}

}  // namespace ejk::cache
