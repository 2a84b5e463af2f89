// The on-disk cache of compiled variants (CPU objects now, GPU binaries later).
//
// Layout: <root>/<backend>/<key>-<hash16>.bin, where hash16 is the first 16 hex characters of
// the caller's hash of everything that determines the binary. The root ends in
// "/v<kFormatVersion>", so a format change never reads old files.
//
// Writers publish an entry with write-to-temp + fsync + rename, so a reader sees either no
// file or a whole one. Readers still verify everything (the disk, a crash or a person can
// damage a file) and treat a bad entry as a miss after removing it.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ejk::cache {

inline constexpr int kFormatVersion = 1;

// $EJK_CACHE_DIR, else $XDG_CACHE_HOME/ejkernel, else ~/.cache/ejkernel; then "/v1".
std::filesystem::path default_root();

struct EntryInfo {
  std::string backend, key, hash_hex;  // from the header when readable, else from the name
  std::filesystem::path path;
  uint64_t size = 0;                   // file size in bytes
  bool valid = false;
  std::string problem;                 // why not valid; empty when valid
};

class EntryLock;

class DiskCache {
 public:
  explicit DiskCache(std::filesystem::path root = default_root());

  // The payload of a valid entry, or nullopt on a miss. A corrupt, truncated or mismatched
  // entry is removed and reported as a miss. Throws ejk::Error when the file exists but
  // cannot be read (permissions, I/O error).
  std::optional<std::vector<uint8_t>> load(const std::string& backend, const std::string& key,
                                           const std::string& hash_hex);

  // Publishes the entry atomically (temp file in the same directory, fsync, rename, fsync of
  // the directory). Replaces an existing entry. Throws ejk::Error naming the path on failure.
  void store(const std::string& backend, const std::string& key, const std::string& hash_hex,
             std::span<const uint8_t> payload);

  // Every entry file under the root. verify = false checks headers and sizes only;
  // verify = true also checks payload checksums. Nothing is removed.
  std::vector<EntryInfo> list(bool verify = false) const;

  // Removes every entry, stale temp files and unheld lock files; returns the entries removed.
  size_t clear();

  // Blocks until this process holds the entry's lock (see EntryLock).
  EntryLock lock(const std::string& backend, const std::string& key, const std::string& hash_hex);

  // Where the entry for these arguments lives (validates them like load/store).
  std::filesystem::path entry_path(const std::string& backend, const std::string& key,
                                   const std::string& hash_hex) const;

  const std::filesystem::path& root() const { return root_; }

 private:
  std::filesystem::path root_;
};

// An exclusive flock on "<entry>.lock" beside the entry. It only keeps processes (and threads,
// since each lock opens its own file description) from compiling the same entry twice;
// correctness never depends on it because store() is atomic. Use local filesystems: flock on
// network filesystems may be a no-op.
class EntryLock {
 public:
  // Blocks until held. Throws ejk::Error naming the lock file when it cannot be created.
  static EntryLock acquire(const std::filesystem::path& lock_path);
  // Returns nullopt at once when another holder has it.
  static std::optional<EntryLock> try_acquire(const std::filesystem::path& lock_path);

  EntryLock(EntryLock&& other) noexcept;
  EntryLock& operator=(EntryLock&& other) noexcept;
  EntryLock(const EntryLock&) = delete;
  EntryLock& operator=(const EntryLock&) = delete;
  ~EntryLock();

  // Deletes the lock file while still holding it; later acquirers notice and use a new file.
  void remove_file();
  const std::filesystem::path& path() const { return path_; }

 private:
  EntryLock(std::filesystem::path path, int fd) : path_(std::move(path)), fd_(fd) {}
  static std::optional<EntryLock> acquire_impl(const std::filesystem::path& lock_path,
                                               bool blocking);
  std::filesystem::path path_;
  int fd_ = -1;
};

}  // namespace ejk::cache
