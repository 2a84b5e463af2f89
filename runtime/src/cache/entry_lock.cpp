// EntryLock: flock on a lock file beside the entry.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "cache/disk_cache.h"
#include "ejk/core/error.h"

namespace ejk::cache {
namespace fs = std::filesystem;
namespace {

// True when `fd` is still the file that `path` names. A holder may have removed the lock file
// (clear()) after we opened it; locking the orphaned inode would exclude nobody.
bool still_linked(int fd, const fs::path& path) {
  struct stat by_fd, by_path;
  if (::fstat(fd, &by_fd) != 0 || ::stat(path.c_str(), &by_path) != 0) return false;
  return by_fd.st_dev == by_path.st_dev && by_fd.st_ino == by_path.st_ino;
}

int flock_retrying(int fd, int op) {
  int rc;
  do {
    rc = ::flock(fd, op);
  } while (rc != 0 && errno == EINTR);
  return rc;
}

}  // namespace

std::optional<EntryLock> EntryLock::acquire_impl(const fs::path& lock_path, bool blocking) {
  std::error_code ec;
  fs::create_directories(lock_path.parent_path(), ec);
  if (ec)
    throw Error(fmt::format("cache: cannot create directory '{}' for lock: {}",
                            lock_path.parent_path().string(), ec.message()));
  for (;;) {
    int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0)
      throw Error(fmt::format("cache: cannot open lock file '{}': {}", lock_path.string(),
                              std::strerror(errno)));
    int op = blocking ? LOCK_EX : (LOCK_EX | LOCK_NB);
    if (flock_retrying(fd, op) != 0) {
      int err = errno;
      ::close(fd);
      if (!blocking && err == EWOULDBLOCK) return std::nullopt;
      throw Error(fmt::format("cache: cannot lock '{}': {}", lock_path.string(),
                              std::strerror(err)));
    }
    if (still_linked(fd, lock_path)) return EntryLock(lock_path, fd);
    ::close(fd);  // The file was removed while we waited: lock the new one instead.
  }
}

EntryLock EntryLock::acquire(const fs::path& lock_path) {
  return std::move(*acquire_impl(lock_path, /*blocking=*/true));
}

std::optional<EntryLock> EntryLock::try_acquire(const fs::path& lock_path) {
  return acquire_impl(lock_path, /*blocking=*/false);
}

EntryLock::EntryLock(EntryLock&& other) noexcept
    : path_(std::move(other.path_)), fd_(other.fd_) {
  other.fd_ = -1;
}

EntryLock& EntryLock::operator=(EntryLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

// Closing the descriptor releases the flock.
EntryLock::~EntryLock() {
  if (fd_ >= 0) ::close(fd_);
}

void EntryLock::remove_file() {
  if (fd_ >= 0) ::unlink(path_.c_str());
}

}  // namespace ejk::cache
