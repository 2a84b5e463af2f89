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
};

// Reads at most max_bytes of the file. nullopt when it does not exist; throws otherwise.
std::optional<FileBytes> read_file(const std::filesystem::path& path,
                                   size_t max_bytes = std::numeric_limits<size_t>::max());

// Creates the parent directory if needed, writes a uniquely named temp file beside `path`,
// fsyncs it, renames it over `path` and fsyncs the directory, so that after a crash the
// entry is either absent or whole. The temp file is removed on failure.
void write_file_atomic(const std::filesystem::path& path, std::span<const uint8_t> bytes);

// Removes `path` only while it still names the file (device, inode): another process may
// have replaced a bad entry by a good one since it was read. Returns true when removed.
bool remove_if_same_file(const std::filesystem::path& path, uint64_t device, uint64_t inode);

// Temp files are "<final name>.tmp.<pid>.<random>"; this tells them apart from entries.
bool is_temp_file_name(const std::string& file_name);

}  // namespace ejk::cache::io
