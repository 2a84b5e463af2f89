// EntryLock: flock on a lock file beside the entry.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

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

// O_NONBLOCK and O_NOFOLLOW: a FIFO or a link planted at the lock path must not block or
// redirect the open; anything but a regular file is refused.
int open_lock_file(const fs::path& lock_path) {
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW, 0644);
  if (fd < 0)
    throw Error(fmt::format("cache: cannot open lock file '{}': {}", lock_path.string(),
                            std::strerror(errno)));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(fmt::format("cache: lock file '{}' is not a regular file", lock_path.string()));
  }
  return fd;
}

// Polls a non-blocking flock until `deadline`: flock itself has no timeout, and a holder that
// is stopped (SIGSTOP, a debugger) must not stall every other process forever.
bool lock_until(int fd, std::chrono::steady_clock::time_point deadline) {
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    if (flock_retrying(fd, LOCK_EX | LOCK_NB) == 0) return true;
    if (errno != EWOULDBLOCK) return false;
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      errno = ETIMEDOUT;
      return false;
    }
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

}  // namespace

std::optional<EntryLock> EntryLock::acquire_impl(const fs::path& lock_path,
                                                 std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int fd = open_lock_file(lock_path);
    if (!lock_until(fd, deadline)) {
      int err = errno;
      ::close(fd);
      if (err == ETIMEDOUT) return std::nullopt;
      throw Error(fmt::format("cache: cannot lock '{}': {}", lock_path.string(),
                              std::strerror(err)));
    }
    if (still_linked(fd, lock_path)) return EntryLock(lock_path, fd);
    ::close(fd);  // The file was removed while we waited: lock the new one instead.
  }
}

std::optional<EntryLock> EntryLock::acquire_for(const fs::path& lock_path,
                                                std::chrono::milliseconds timeout) {
  return acquire_impl(lock_path, timeout);
}

std::optional<EntryLock> EntryLock::try_acquire(const fs::path& lock_path) {
  return acquire_impl(lock_path, std::chrono::milliseconds(0));
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
