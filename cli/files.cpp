#include "files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

#include "ejk/core/error.h"

namespace ejk::cli {
namespace {

std::string why(int err) { return std::strerror(err); }

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISLNK(m)) return "a symlink";
  return "not a regular file";
}

}  // namespace

ReadFile::ReadFile(const std::filesystem::path& path, std::string_view what) : name_(path.string()) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it.
  fd_ = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) {
    const int err = errno;
    throw InvalidArgument(err == ELOOP ? fmt::format("{} {}: is a symlink; expected a regular file", what, name_)
                                       : fmt::format("{} {}: cannot open: {}", what, name_, why(err)));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string kind = kind_of(st.st_mode);
    ::close(fd_);
    fd_ = -1;
    throw InvalidArgument(fmt::format("{} {}: is {}; expected a regular file", what, name_, kind));
  }
  size_ = uint64_t(st.st_size);
}

ReadFile::~ReadFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ReadFile::read_at(uint64_t offset, void* dst, uint64_t n) const {
  auto* p = static_cast<char*>(dst);
  uint64_t done = 0;
  while (done < n) {
    const size_t chunk = size_t(std::min<uint64_t>(n - done, uint64_t{1} << 30));
    const ssize_t r = ::pread(fd_, p + done, chunk, off_t(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw InvalidArgument(fmt::format("{}: read failed: {}", name_, why(errno)));
    if (r == 0) throw InvalidArgument(fmt::format("{}: truncated ({} of {} bytes)", name_, done, n));
    done += uint64_t(r);
  }
}

std::string read_small_file(const std::filesystem::path& path, uint64_t max_bytes, std::string_view what) {
  ReadFile f(path, what);
  if (f.size() > max_bytes)
    throw InvalidArgument(fmt::format("{} {}: {} bytes, more than the {} a file of this kind may have", what,
                                      path.string(), f.size(), max_bytes));
  std::string text(size_t(f.size()), '\0');
  f.read_at(0, text.data(), text.size());
  return text;
}

WriteDir::WriteDir(const std::filesystem::path& dir, std::string_view option) : dir_(dir) {
  if (dir.empty()) throw InvalidArgument(fmt::format("{}: expected a folder", option));
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    throw InvalidArgument(fmt::format("{} {}: cannot create the folder: {}", option, dir.string(), why(errno)));
  fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd_ < 0)
    throw InvalidArgument(fmt::format("{} {}: not a folder (or a symlink to one): {}", option, dir.string(), why(errno)));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || st.st_uid != ::geteuid()) {
    ::close(fd_);
    fd_ = -1;
    throw InvalidArgument(fmt::format("{} {}: the folder is not owned by this user", option, dir.string()));
  }
}

WriteDir::~WriteDir() {
  if (fd_ >= 0) ::close(fd_);
}

WriteFile::WriteFile(const WriteDir& dir, const std::string& name) : name_((dir.path() / name).string()) {
  open_at(dir.fd(), name);
}

WriteFile::WriteFile(const std::filesystem::path& path, std::string_view option) : name_(path.string()) {
  const std::filesystem::path parent = path.has_parent_path() ? path.parent_path() : ".";
  const int dirfd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirfd < 0) throw InvalidArgument(fmt::format("{} {}: no such folder: {}", option, parent.string(), why(errno)));
  try {
    open_at(dirfd, path.filename().string());
  } catch (...) {
    ::close(dirfd);
    throw;
  }
  ::close(dirfd);
}

void WriteFile::open_at(int dirfd, const std::string& name) {
  // O_NONBLOCK keeps an existing FIFO from blocking the open; it is refused just below.
  fd_ = ::openat(dirfd, name.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int err = errno;
    // ENXIO: a FIFO without a reader (O_NONBLOCK), which is no file to write a result into.
    throw InvalidArgument(err == ELOOP   ? fmt::format("{}: is a symlink; refusing to write through it", name_)
                          : err == ENXIO ? fmt::format("{}: is a FIFO; expected a new path or a regular file", name_)
                                         : fmt::format("{}: cannot write: {}", name_, why(err)));
  }
  struct stat st {};
  const bool ok = ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid();
  if (!ok) {
    const std::string kind = S_ISREG(st.st_mode) ? "a file owned by another user" : kind_of(st.st_mode);
    ::close(fd_);
    fd_ = -1;
    throw InvalidArgument(fmt::format("{}: is {}; expected a new path or a regular file of this user", name_, kind));
  }
  // Truncate only now that the file is known to be ours and regular.
  if (::ftruncate(fd_, 0) != 0 || ::fcntl(fd_, F_SETFL, 0) != 0)
    throw Error(fmt::format("{}: cannot truncate: {}", name_, why(errno)));
}

WriteFile::~WriteFile() {
  if (fd_ >= 0) ::close(fd_);
}

void WriteFile::write(const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw Error(fmt::format("{}: write failed: {}", name_, w < 0 ? why(errno) : "no progress"));
    p += w;
    n -= size_t(w);
  }
}

void WriteFile::close() {
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw Error(fmt::format("{}: write failed: {}", name_, why(errno)));
}

}  // namespace ejk::cli
