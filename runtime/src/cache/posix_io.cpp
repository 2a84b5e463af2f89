#include "cache/posix_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include <fmt/format.h>

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
// shared cache directory should follow the user's umask like any other file.
std::pair<fs::path, int> create_temp_beside(const fs::path& path) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  for (int attempt = 0; attempt < 16; ++attempt) {
    fs::path temp = path;
    temp += fmt::format(".tmp.{}.{}", ::getpid(), util::hex64(rng()));
    int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) return {temp, fd};
    if (errno != EEXIST) throw_errno("create", temp, errno);
  }
  throw Error(fmt::format("cache: cannot find a free temp name beside '{}'", path.string()));
}

void fsync_directory(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_errno("open directory", dir, errno);
  Fd guard(fd);
  // Some filesystems cannot fsync a directory (EINVAL); the rename is still atomic there.
  if (::fsync(fd) != 0 && errno != EINVAL) throw_errno("fsync directory", dir, errno);
}

}  // namespace

std::optional<FileBytes> read_file(const fs::path& path, size_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw_errno("open", path, errno);
  }
  Fd guard(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) throw_errno("stat", path, errno);
  FileBytes out;
  out.size = static_cast<uint64_t>(st.st_size);
  out.device = static_cast<uint64_t>(st.st_dev);
  out.inode = static_cast<uint64_t>(st.st_ino);
  out.bytes.resize(static_cast<size_t>(std::min<uint64_t>(out.size, max_bytes)));
  read_exact(fd, out.bytes.data(), out.bytes.size(), path);
  return out;
}

void write_file_atomic(const fs::path& path, std::span<const uint8_t> bytes) {
  fs::path dir = path.parent_path();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(fmt::format("cache: cannot create directory '{}': {}", dir.string(),
                                  ec.message()));
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
  fsync_directory(dir);
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

bool is_temp_file_name(const std::string& file_name) {
  return file_name.find(".tmp.") != std::string::npos;
}

}  // namespace ejk::cache::io
