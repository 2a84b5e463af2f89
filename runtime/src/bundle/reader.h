// Reading a bundle (bundle/format.h): the header and manifest when opened, each entry's payload
// on demand, every read bounds-checked against the file and every payload verified (both
// checksums, its size, a well-formed zstd frame) before anything sees it.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "bundle/format.h"

namespace ejk::bundle {

// Where a bundle's bytes come from: a file (pread) or memory (tests, the fuzzer).
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t size() const = 0;
  // Fills `out` from `offset`; false when the source has fewer bytes there (a file that shrank).
  virtual bool read(uint64_t offset, std::span<uint8_t> out) const = 0;
};

class MemorySource : public ByteSource {
 public:
  explicit MemorySource(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  uint64_t size() const override { return bytes_.size(); }
  bool read(uint64_t offset, std::span<uint8_t> out) const override;

 private:
  std::span<const uint8_t> bytes_;  // not owned
};

class FileSource : public ByteSource {
 public:
  // Opens a regular file; InvalidArgument naming the path otherwise. With require_trust (code
  // will be loaded from it), also one owned by this user or root and writable by nobody else,
  // as the disk cache's entries must be (cache/trust.h).
  static std::unique_ptr<FileSource> open(const std::filesystem::path& path, bool require_trust = true);
  ~FileSource() override;
  uint64_t size() const override { return size_; }
  bool read(uint64_t offset, std::span<uint8_t> out) const override;

 private:
  FileSource(int fd, uint64_t size) : fd_(fd), size_(size) {}
  int fd_ = -1;
  uint64_t size_ = 0;
};

// One manifest slot: its record, or why the entry is unusable (its record is damaged, a
// duplicate, or its payload lies outside the file).
struct Slot {
  std::optional<Record> record;
  std::string problem;
};

struct Payload {
  std::vector<uint8_t> bytes;  // decompressed and verified; empty when `problem` is set
  std::string problem;
};

class Reader {
 public:
  // Reads and checks the header and the manifest. Throws InvalidArgument "bundle 'NAME':
  // header: ..." when the bundle as a whole cannot be used (not a bundle, a newer format, a
  // damaged header, a manifest outside the file); damage confined to entries is per slot.
  Reader(std::unique_ptr<ByteSource> source, std::string name);

  const std::string& name() const { return name_; }
  const Header& header() const { return header_; }
  const std::vector<Slot>& slots() const { return slots_; }
  // Damage outside any one entry that leaves the entries usable: a file shorter or longer
  // than its header says (entries past the end are then unusable, each for itself).
  const std::vector<std::string>& problems() const { return problems_; }

  // Entry i's binary: read, both checksums and the size verified, decompressed.
  Payload read(size_t i) const;

 private:
  void read_manifest();
  void refuse_shared_payloads();
  std::string check_placement(const Record& r) const;

  std::unique_ptr<ByteSource> source_;
  std::string name_;
  Header header_;
  std::vector<Slot> slots_;
  std::vector<std::string> problems_;
};

}  // namespace ejk::bundle
