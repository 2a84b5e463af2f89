#include "cache/trust.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "ejk/core/error.h"

namespace ejk::cache::trust {
namespace fs = std::filesystem;
namespace {

enum class Level {
  Cache,     // the root and backend directories: nobody else may write
  Guard,     // the root's parent and directories we created: nobody else, unless sticky
  Ancestor,  // further up: not writable by everyone, unless sticky
};

bool trusted_owner(uid_t uid) { return uid == ::geteuid() || uid == 0; }

std::string owner_problem(const fs::path& path, const struct stat& st) {
  return fmt::format("'{}' is owned by uid {}, not by this user (uid {}) or root", path.string(),
                     st.st_uid, ::geteuid());
}

std::optional<std::string> check_directory(const fs::path& dir, const struct stat& st, Level level) {
  if (!S_ISDIR(st.st_mode)) return fmt::format("'{}' is not a directory", dir.string());
  const bool sticky = (st.st_mode & S_ISVTX) != 0;
  const bool others_write = (st.st_mode & S_IWOTH) != 0;
  const bool group_write = (st.st_mode & S_IWGRP) != 0;
  if (level == Level::Ancestor) {
    if (others_write && !sticky)
      return fmt::format("'{}' is writable by every user: anyone could replace the cache in it",
                         dir.string());
    return std::nullopt;
  }
  if (!trusted_owner(st.st_uid)) return owner_problem(dir, st);
  if ((group_write || others_write) && (level == Level::Cache || !sticky))
    return fmt::format("'{}' is writable by {} (mode {:04o}): remove that with chmod go-w",
                       dir.string(), others_write ? "other users" : "its group",
                       st.st_mode & 07777);
  return std::nullopt;
}

// The path and each of its parents, outermost first.
std::vector<fs::path> prefixes(const fs::path& path) {
  std::vector<fs::path> out;
  fs::path current;
  for (const fs::path& part : path) {
    current /= part;
    out.push_back(current);
  }
  return out;
}

Level level_of(const fs::path& dir, const fs::path& root, const std::set<fs::path>& created) {
  if (dir == root || dir.parent_path() == root) return Level::Cache;
  if (dir == root.parent_path() || created.count(dir)) return Level::Guard;
  return Level::Ancestor;
}

std::optional<std::string> check_prefixes(const fs::path& root, std::string_view backend,
                                          const std::set<fs::path>& created) {
  const fs::path leaf = backend.empty() ? root : root / backend;
  for (const fs::path& dir : prefixes(leaf)) {
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0) {
      if (errno == ENOENT) return std::nullopt;  // nothing below exists yet
      return fmt::format("cannot access '{}': {}", dir.string(), std::strerror(errno));
    }
    if (auto problem = check_directory(dir, st, level_of(dir, root, created))) return problem;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> check_entry_file(const fs::path& path, const struct stat& st) {
  if (!S_ISREG(st.st_mode))
    return fmt::format("'{}' is a {}, not a regular file", path.string(), file_kind(st.st_mode));
  if (!trusted_owner(st.st_uid)) return owner_problem(path, st);
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return fmt::format("'{}' is writable by group or others (mode {:04o})", path.string(),
                       st.st_mode & 07777);
  return std::nullopt;
}

std::optional<std::string> check_file_directory(const fs::path& dir) {
  const std::vector<fs::path> dirs = prefixes(fs::absolute(dir).lexically_normal());
  for (size_t i = 0; i < dirs.size(); ++i) {
    struct stat st;
    if (::stat(dirs[i].c_str(), &st) != 0)
      return fmt::format("cannot access '{}': {}", dirs[i].string(), std::strerror(errno));
    if (auto problem = check_directory(dirs[i], st, i + 1 == dirs.size() ? Level::Guard : Level::Ancestor))
      return problem;
  }
  return std::nullopt;
}

std::optional<std::string> check_tree(const fs::path& root, std::string_view backend) {
  return check_prefixes(root, backend, {});
}

void ensure_tree(const fs::path& root, std::string_view backend, mode_t mode) {
  std::set<fs::path> created;
  const fs::path leaf = backend.empty() ? root : root / backend;
  for (const fs::path& dir : prefixes(leaf)) {
    struct stat st;
    if (::stat(dir.c_str(), &st) == 0) continue;  // checked below, with the rest
    if (errno != ENOENT)
      throw Error(fmt::format("cache: cannot access '{}': {}", dir.string(), std::strerror(errno)));
    if (::mkdir(dir.c_str(), mode) != 0 && errno != EEXIST)
      throw Error(fmt::format("cache: cannot create directory '{}': {}", dir.string(),
                              std::strerror(errno)));
    created.insert(dir);  // also when another process won the race: it must pass as ours
  }
  if (auto problem = check_prefixes(root, backend, created))
    throw Error(fmt::format("cache: {}", *problem));
}

std::string_view file_kind(mode_t mode) {
  if (S_ISREG(mode)) return "regular file";
  if (S_ISDIR(mode)) return "directory";
  if (S_ISFIFO(mode)) return "fifo";
  if (S_ISLNK(mode)) return "symbolic link";
  if (S_ISSOCK(mode)) return "socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "device";
  return "special file";
}

}  // namespace ejk::cache::trust
