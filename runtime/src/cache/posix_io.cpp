#include "cache/posix_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "cache/trust.h"
#include "ejk/core/checked.h"
#include "ejk/core/error.h"
#include "util/hash.h"

namespace ejk::cache::io {
namespace fs = std::filesystem;
namespace {

[[noreturn]] void throw_errno(const char* what, const fs::path& path, int err) {
  throw Error(fmt::format("cache: cannot {} '{}': {}", what, path.string(), std::strerror(err)));
}

// Closes on scope exit so every early throw releases the descriptor.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  // Closes now and reports close's error: on some filesystems write errors surface here.
  int close_checked() {
    int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

void read_exact(int fd, uint8_t* out, size_t n, const fs::path& path) {
  size_t done = 0;
  while (done < n) {
    ssize_t got = ::read(fd, out + done, n - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw_errno("read", path, errno);
    if (got == 0) throw Error(fmt::format("cache: '{}' shrank while being read", path.string()));
    done += static_cast<size_t>(got);
  }
}

void write_all(int fd, std::span<const uint8_t> bytes, const fs::path& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t put = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) throw_errno("write", path, errno);
    done += static_cast<size_t>(put);
  }
}

// O_EXCL with a random suffix instead of mkstemp: mkstemp forces mode 0600, while entries of a
// shared cache should be readable by others; 0644 so no umask makes them group-writable.
std::pair<fs::path, int> create_temp_beside(const fs::path& path) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  for (int attempt = 0; attempt < 16; ++attempt) {
    fs::path temp = path;
    temp += fmt::format(".tmp.{}.{}", ::getpid(), util::hex64(rng()));
    int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd >= 0) return {temp, fd};
    if (errno != EEXIST) throw_errno("create", temp, errno);
  }
  throw Error(fmt::format("cache: cannot find a free temp name beside '{}'", path.string()));
}

// Empty on success; else why. Some filesystems cannot fsync a directory (EINVAL): the rename
// is still atomic there, so that is no failure.
std::string fsync_directory(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return fmt::format("cannot open directory '{}': {}", dir.string(), std::strerror(errno));
  Fd guard(fd);
  if (::fsync(fd) != 0 && errno != EINVAL)
    return fmt::format("cannot fsync directory '{}': {}", dir.string(), std::strerror(errno));
  return {};
}

// Opens a regular file for reading without following a symbolic link and without blocking;
// -1 with errno ENOENT when absent. lstat first, so a FIFO or device is never even opened.
int open_regular(const fs::path& path, struct stat& st) {
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return -1;
    throw_errno("stat", path, errno);
  }
  if (!S_ISREG(st.st_mode))
    throw Error(fmt::format("cache: '{}' is a {}, not a regular file", path.string(),
                            trust::file_kind(st.st_mode)));
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT) return -1;
    throw_errno("open", path, errno);
  }
  struct stat opened;
  // Replaced between lstat and open: judge what was opened.
  if (::fstat(fd, &opened) != 0 || !S_ISREG(opened.st_mode)) {
    ::close(fd);
    throw Error(fmt::format("cache: '{}' changed into a non-regular file while opened", path.string()));
  }
  st = opened;
  return fd;
}

}  // namespace

std::optional<FileBytes> read_file(const fs::path& path, size_t max_bytes) {
  struct stat st;
  int fd = open_regular(path, st);
  if (fd < 0) return std::nullopt;
  Fd guard(fd);
  FileBytes out;
  out.size = static_cast<uint64_t>(st.st_size);
  out.device = static_cast<uint64_t>(st.st_dev);
  out.inode = static_cast<uint64_t>(st.st_ino);
  out.untrusted = trust::check_entry_file(path, st);
  out.bytes.resize(static_cast<size_t>(std::min<uint64_t>(out.size, max_bytes)));
  read_exact(fd, out.bytes.data(), out.bytes.size(), path);
  return out;
}

std::string write_file_atomic(const fs::path& path, std::span<const uint8_t> bytes) {
  auto [temp, fd] = create_temp_beside(path);
  try {
    Fd guard(fd);
    write_all(fd, bytes, temp);
    if (::fsync(fd) != 0) throw_errno("fsync", temp, errno);
    if (guard.close_checked() != 0) throw_errno("close", temp, errno);
    if (::rename(temp.c_str(), path.c_str()) != 0) throw_errno("rename into", path, errno);
  } catch (...) {
    ::unlink(temp.c_str());
    throw;
  }
  return fsync_directory(path.parent_path());
}

bool remove_if_same_file(const fs::path& path, uint64_t device, uint64_t inode) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return false;
  if (static_cast<uint64_t>(st.st_dev) != device || static_cast<uint64_t>(st.st_ino) != inode)
    return false;
  // A replacement renamed in between stat and unlink would be lost; that costs one rebuild,
  // never a wrong load, and the window is microseconds.
  return ::unlink(path.c_str()) == 0;
}

std::optional<std::vector<std::string>> list_directory(const fs::path& dir, std::string& error) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    error = fmt::format("cannot list '{}': {}", dir.string(), std::strerror(errno));
    return std::nullopt;
  }
  std::vector<std::string> names;
  errno = 0;
  while (const struct dirent* e = ::readdir(d)) {
    std::string_view name = e->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  int err = errno;
  ::closedir(d);
  if (err != 0) {
    error = fmt::format("cannot list '{}': {}", dir.string(), std::strerror(err));
    return std::nullopt;
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::optional<long> temp_file_writer(const std::string& file_name) {
  // "<key>-<hash16>.bin.tmp.<pid>.<16 hex>"
  constexpr std::string_view kMarker = ".bin.tmp.";
  size_t at = file_name.rfind(kMarker);
  if (at == std::string::npos) return std::nullopt;
  std::string_view rest = std::string_view(file_name).substr(at + kMarker.size());
  size_t dot = rest.find('.');
  if (dot == std::string_view::npos || rest.size() - dot - 1 != 16 ||
      !util::is_lower_hex(rest.substr(dot + 1)))
    return std::nullopt;
  std::optional<int64_t> pid = parse_decimal(rest.substr(0, dot), 1, INT32_MAX);
  if (!pid) return std::nullopt;
  return static_cast<long>(*pid);
}

bool is_temp_file_name(const std::string& file_name) {
  return temp_file_writer(file_name).has_value();
}

bool process_alive(long pid) {
  if (pid == static_cast<long>(::getpid())) return true;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

}  // namespace ejk::cache::io
