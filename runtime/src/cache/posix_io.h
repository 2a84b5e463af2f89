// The few POSIX file operations the cache needs, with errors as ejk::Error naming the path.
#pragma once
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ejk::cache::io {

struct FileBytes {
  std::vector<uint8_t> bytes;  // the first min(size, max_bytes) bytes
  uint64_t size = 0;           // the whole file's size
  uint64_t device = 0, inode = 0;
  std::optional<std::string> untrusted;  // why the file's owner or mode is not trusted
};

// Reads at most max_bytes of a regular file. nullopt when it does not exist; throws ejk::Error
// otherwise, also for a FIFO, directory, device or symbolic link at `path`: those are never
// opened (a FIFO's open would block), and the open itself cannot block (O_NONBLOCK).
std::optional<FileBytes> read_file(const std::filesystem::path& path,
                                   size_t max_bytes = std::numeric_limits<size_t>::max());

// Writes a uniquely named temp file beside `path` (mode 0644 less the umask: never writable by
// group or others, which readers would refuse), fsyncs it and renames it over `path`, so that
// after a crash the entry is either absent or whole; the temp file is removed on failure.
// The directory must exist. Returns a note when only the final directory fsync failed: the
// entry is then in place, just not yet durable across a power loss.
std::string write_file_atomic(const std::filesystem::path& path, std::span<const uint8_t> bytes);

// Removes `path` only while it still names the file (device, inode): another process may
// have replaced a bad entry by a good one since it was read. Returns true when removed.
bool remove_if_same_file(const std::filesystem::path& path, uint64_t device, uint64_t inode);

// The names in `dir` (without "." and ".."), sorted; nullopt with `error` set when it cannot
// be read.
std::optional<std::vector<std::string>> list_directory(const std::filesystem::path& dir,
                                                       std::string& error);

// Temp files are "<final name>.tmp.<pid>.<16 hex>"; the writer's pid in the name lets a later
// process tell a live writer's file from one a crash left behind.
bool is_temp_file_name(const std::string& file_name);
// The writer's pid of a temp file name, or nullopt for other names.
std::optional<long> temp_file_writer(const std::string& file_name);
// True while process `pid` exists (as far as this pid namespace can tell).
bool process_alive(long pid);

}  // namespace ejk::cache::io
