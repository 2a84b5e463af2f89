// The on-disk cache of compiled variants (CPU objects, CUDA cubins).
//
// Layout: <root>/<backend>/<key>-<hash16>.bin, where hash16 is the first 16 hex characters of
// the caller's hash of everything that determines the binary. The root ends in
// "/v<kFormatVersion>", so a format change never reads old files.
//
// Writers publish an entry with write-to-temp + fsync + rename, so a reader sees either no
// file or a whole one. Readers still verify everything (the disk, a crash or a person can
// damage a file) and treat a bad entry as a miss after removing it.
//
// What the cache trusts (cache/trust.h): entries are loaded only from a root and backend
// directory owned by this user or root and writable by nobody else; anything else makes the
// cache unusable (callers compile in memory) rather than a source of code.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ejk::cache {

inline constexpr int kFormatVersion = 2;

// $EJK_CACHE_DIR, else $XDG_CACHE_HOME/ejkernel, else ~/.cache/ejkernel, else
// $TMPDIR/ejkernel-<uid> (private: created 0700); then "/v1".
std::filesystem::path default_root();

struct EntryInfo {
  std::string backend, key, hash_hex;  // from the header when readable, else from the name
  std::filesystem::path path;
  uint64_t size = 0;                   // file size in bytes
  bool valid = false;
  std::string problem;                 // why not valid; empty when valid
  // "entry" (a <key>-<hash>.bin file), "temp" (a writer's temp file), "root" (the cache root
  // itself is unusable), or "other" (anything else found in the cache: directories, FIFOs,
  // unknown names, unreadable directories).
  std::string kind = "entry";
};

// A check of an entry's payload before it is returned (e.g. check_payload with the kernel
// symbol): nullopt when acceptable, else why not.
using PayloadCheck = std::function<std::optional<std::string>(std::span<const uint8_t>)>;

// What a lookup found: the payload of a good entry, or a miss; when a bad entry was removed on
// the way, `removed` says why.
struct Lookup {
  std::optional<std::vector<uint8_t>> payload;
  std::string removed;
};

class EntryLock;

class DiskCache {
 public:
  DiskCache();  // at default_root(), with the private mode where that is the $TMPDIR fallback
  explicit DiskCache(std::filesystem::path root);

  // Why entries cannot be loaded from (or stored into) this cache for `backend`, or nullopt
  // when it is usable: an untrusted owner or mode, a path that is not a directory, or one that
  // cannot be accessed (EACCES, ENOTDIR, ENAMETOOLONG, ...). A missing root is usable.
  std::optional<std::string> unusable(const std::string& backend = "") const;

  // True when the root exists but this user cannot write it (a shared, pre-warmed cache):
  // entries load, new ones cannot be stored.
  bool read_only() const;

  // The payload of a good entry, or nullopt on a miss. A corrupt, truncated, mismatched or
  // untrusted (owner, mode) entry, or one `check` refuses, is removed and reported as a miss.
  // Throws ejk::Error when the entry cannot be read (permissions, I/O error, a FIFO or a
  // directory at its path) or the cache is unusable.
  Lookup lookup(const std::string& backend, const std::string& key, const std::string& hash_hex,
                const PayloadCheck& check = {});
  std::optional<std::vector<uint8_t>> load(const std::string& backend, const std::string& key,
                                           const std::string& hash_hex) {
    return lookup(backend, key, hash_hex).payload;
  }

  // Publishes the entry atomically (temp file in the same directory, fsync, rename, fsync of
  // the directory), creating the directories it needs, and removes temp files that dead writers
  // left in that directory. Replaces an existing entry. Throws ejk::Error naming the path on
  // failure. Returns a note when the entry is in place but the directory fsync failed.
  std::string store(const std::string& backend, const std::string& key, const std::string& hash_hex,
                    std::span<const uint8_t> payload);

  // Removes the entry (e.g. one that failed to load); true when a file was removed.
  bool remove_entry(const std::string& backend, const std::string& key, const std::string& hash_hex);

  // Everything under the root: entries, and every non-entry as kind "temp" or "other" (never
  // valid), or one "root" record when the root is unusable. verify = false checks headers and
  // sizes; verify = true also payload checksums and check_payload with the key's kernel
  // symbol. Nothing is removed.
  std::vector<EntryInfo> list(bool verify = false) const;

  // Removes every entry, temp files of dead writers (and any older than 10 minutes) and unheld
  // lock files; returns the entries removed. Throws ejk::Error when the root is unusable.
  size_t clear();

  // Waits up to `timeout` for this process to hold the entry's lock; nullopt on timeout.
  // Throws ejk::Error when the lock file cannot be created or locked.
  std::optional<EntryLock> lock_for(const std::string& backend, const std::string& key,
                                    const std::string& hash_hex, std::chrono::milliseconds timeout);
  // Waits up to lock_timeout(); throws ejk::Error on timeout.
  EntryLock lock(const std::string& backend, const std::string& key, const std::string& hash_hex);

  // Where the entry for these arguments lives (validates them like load/store).
  std::filesystem::path entry_path(const std::string& backend, const std::string& key,
                                   const std::string& hash_hex) const;

  const std::filesystem::path& root() const { return root_; }

 private:
  void ensure_directories(const std::string& backend) const;
  std::filesystem::path root_;
  mode_t dir_mode_ = 0755;  // for directories it creates
};

// EJK_CACHE_LOCK_TIMEOUT_S (0..86400), default 60 s: how long a process waits for another
// one compiling the same entry before it compiles the entry itself.
std::chrono::milliseconds lock_timeout();

// An exclusive flock on "<entry>.lock" beside the entry. It only keeps processes (and threads,
// since each lock opens its own file description) from compiling the same entry twice;
// correctness never depends on it because store() is atomic. Use local filesystems: flock on
// network filesystems may be a no-op.
class EntryLock {
 public:
  // Waits up to `timeout`; nullopt when another holder kept it that long. Throws ejk::Error
  // naming the lock file when it cannot be created or is not a regular file.
  static std::optional<EntryLock> acquire_for(const std::filesystem::path& lock_path,
                                              std::chrono::milliseconds timeout);
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
                                               std::chrono::milliseconds timeout);
  std::filesystem::path path_;
  int fd_ = -1;
};

}  // namespace ejk::cache
