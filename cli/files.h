// Files the CLI reads from and writes to folders a user names (--load, --save, bundle --out):
// opened without following symlinks, only when they are regular files (a FIFO would block, a
// device node would be overwritten), and every write checked (a full disk is an error, not an
// empty file). Errors are ejk::InvalidArgument naming the path and the reason.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace ejk::cli {

// A regular file opened for reading (O_NOFOLLOW; FIFOs and devices refused without blocking).
class ReadFile {
 public:
  ReadFile(const std::filesystem::path& path, std::string_view what);
  ~ReadFile();
  ReadFile(const ReadFile&) = delete;
  ReadFile& operator=(const ReadFile&) = delete;
  uint64_t size() const { return size_; }
  // Reads exactly `n` bytes at `offset`; InvalidArgument when the file is shorter.
  void read_at(uint64_t offset, void* dst, uint64_t n) const;

 private:
  std::string name_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The whole of a regular file of at most `max_bytes`.
std::string read_small_file(const std::filesystem::path& path, uint64_t max_bytes, std::string_view what);

// A folder to write into: created when missing, else it must be a real directory (not a
// symlink) owned by the user. Files are created in it by name (no '/').
class WriteDir {
 public:
  explicit WriteDir(const std::filesystem::path& dir, std::string_view option);
  ~WriteDir();
  WriteDir(const WriteDir&) = delete;
  WriteDir& operator=(const WriteDir&) = delete;
  const std::filesystem::path& path() const { return dir_; }
  int fd() const { return fd_; }

 private:
  std::filesystem::path dir_;
  int fd_ = -1;
};

// A file being written: a new one, or an existing regular file the user owns (truncated);
// never through a symlink, never a device node or FIFO.
class WriteFile {
 public:
  WriteFile(const WriteDir& dir, const std::string& name);                     // dir/name
  explicit WriteFile(const std::filesystem::path& path, std::string_view option);  // any path
  ~WriteFile();
  WriteFile(const WriteFile&) = delete;
  WriteFile& operator=(const WriteFile&) = delete;
  void write(const void* data, size_t n);
  void write(std::string_view s) { write(s.data(), s.size()); }
  // Closes and reports a failed close (delayed write errors, e.g. a full disk on NFS).
  void close();

 private:
  void open_at(int dirfd, const std::string& name);
  std::string name_;
  int fd_ = -1;
};

}  // namespace ejk::cli
