// Which directories and files the cache may load code from. A checksum detects damage, not
// authorship, so what makes an entry ours is where it lives: the cache root and its backend
// directories must be owned by this user (or by root, for a shared cache pre-warmed by
// `ejk compile`) and writable by nobody else, and so must every directory we create on the way
// and the directory holding the root (sticky ones, like /tmp, excepted: others cannot rename
// our entries out of those). Above that, no directory may be writable by everyone unless it
// is sticky. Entry files: regular, owned by us or root, not writable by group or others.
#pragma once
#include <sys/stat.h>
#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace ejk::cache::trust {

// Why an entry file with this stat cannot be trusted, or nullopt.
std::optional<std::string> check_entry_file(const std::filesystem::path& path,
                                            const struct stat& st);

// Why `root` or `root/backend` (those parts that exist; an empty backend checks the root only)
// cannot be trusted, or nullopt. Missing directories are fine: there is nothing to load.
std::optional<std::string> check_tree(const std::filesystem::path& root, std::string_view backend);

// Why the directory holding a file code is loaded from (a bundle) cannot be trusted, or
// nullopt: `dir` as the cache root's parent is (ours or root's, writable by nobody else unless
// sticky), the directories above it as the cache's ancestors are.
std::optional<std::string> check_file_directory(const std::filesystem::path& dir);

// Creates what is missing of `root/backend` with `mode` (0755 for a cache others may read,
// 0700 for a private one), then checks the tree. Throws ejk::Error with the reason.
void ensure_tree(const std::filesystem::path& root, std::string_view backend, mode_t mode);

// "fifo", "directory", "symbolic link", ... for messages about non-entries.
std::string_view file_kind(mode_t mode);

}  // namespace ejk::cache::trust
