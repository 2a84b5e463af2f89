#include "bundle/reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "cache/trust.h"
#include "ejk/core/error.h"
#include "util/hash.h"

namespace ejk::bundle {
namespace {

// [offset, offset + size) inside [0, limit), without overflow.
bool fits(uint64_t offset, uint64_t size, uint64_t limit) { return offset <= limit && size <= limit - offset; }

// The stored bytes as one zstd frame of exactly `size` decompressed bytes, or why not.
std::string decompress(std::span<const uint8_t> stored, uint64_t size, std::vector<uint8_t>& out) {
  const unsigned long long declared = ZSTD_getFrameContentSize(stored.data(), stored.size());
  if (declared == ZSTD_CONTENTSIZE_ERROR || declared == ZSTD_CONTENTSIZE_UNKNOWN)
    return "payload: not a zstd frame with its content size";
  if (declared != size) return fmt::format("payload: zstd frame of {} bytes (the manifest says {})", declared, size);
  const size_t frame = ZSTD_findFrameCompressedSize(stored.data(), stored.size());
  if (ZSTD_isError(frame) || frame != stored.size())
    return fmt::format("payload: the zstd frame does not span the {} stored bytes", stored.size());
  out.resize(size);
  const size_t n = ZSTD_decompress(out.data(), out.size(), stored.data(), stored.size());
  if (ZSTD_isError(n)) return fmt::format("payload: zstd: {}", ZSTD_getErrorName(n));
  if (n != size) return fmt::format("payload: decompressed to {} bytes (the manifest says {})", n, size);
  return {};
}

}  // namespace

bool MemorySource::read(uint64_t offset, std::span<uint8_t> out) const {
  if (!fits(offset, out.size(), bytes_.size())) return false;
  if (!out.empty()) std::memcpy(out.data(), bytes_.data() + offset, out.size());
  return true;
}

std::unique_ptr<FileSource> FileSource::open(const std::filesystem::path& path, bool require_trust) {
  // O_NONBLOCK: opening a FIFO must not hang; it is refused below as not a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw InvalidArgument(fmt::format("bundle '{}': cannot open: {}", path.string(), std::strerror(errno)));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw InvalidArgument(fmt::format("bundle '{}': cannot stat: {}", path.string(), std::strerror(err)));
  }
  std::optional<std::string> why;
  if (!S_ISREG(st.st_mode))
    why = fmt::format("'{}' is a {}, not a regular file", path.string(), cache::trust::file_kind(st.st_mode));
  else if (require_trust)
    why = cache::trust::check_entry_file(path, st);
  // As for the cache: whoever may replace files in the bundle's directory chooses its code.
  if (!why && require_trust) why = cache::trust::check_file_directory(path.has_parent_path() ? path.parent_path() : ".");
  if (why) {
    ::close(fd);
    throw InvalidArgument(fmt::format("bundle '{}': not used: {}", path.string(), *why));
  }
  return std::unique_ptr<FileSource>(new FileSource(fd, static_cast<uint64_t>(st.st_size)));
}

FileSource::~FileSource() {
  if (fd_ >= 0) ::close(fd_);
}

bool FileSource::read(uint64_t offset, std::span<uint8_t> out) const {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

Reader::Reader(std::unique_ptr<ByteSource> source, std::string name)
    : source_(std::move(source)), name_(std::move(name)) {
  std::vector<uint8_t> head(std::min<uint64_t>(source_->size(), kHeaderSize));
  std::string problem;
  std::optional<Header> h;
  if (source_->read(0, head)) h = decode_header(head, problem);
  else problem = "header: the file could not be read";
  if (!h) throw InvalidArgument(fmt::format("bundle '{}': {}", name_, problem));
  header_ = *h;
  if (source_->size() != header_.file_size)
    problems_.push_back(fmt::format("the file has {} bytes, its header says {} ({})", source_->size(),
                                    header_.file_size, source_->size() < header_.file_size ? "truncated" : "extended"));
  read_manifest();
}

void Reader::read_manifest() {
  const Header& h = header_;
  if (!fits(h.manifest_offset, h.manifest_size, source_->size()))
    throw InvalidArgument(fmt::format("bundle '{}': manifest: truncated: it ends at byte {}, the file has {}", name_,
                                      h.manifest_offset + h.manifest_size, source_->size()));
  std::vector<uint8_t> manifest(h.manifest_size);
  if (!source_->read(h.manifest_offset, manifest))
    throw InvalidArgument(fmt::format("bundle '{}': manifest: the file could not be read", name_));
  const std::span<const uint8_t> m(manifest);
  const uint64_t table = uint64_t(h.entry_count) * kSlotSize;
  std::map<std::tuple<std::string, std::string, std::string>, size_t> seen;
  slots_.resize(h.entry_count);
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    const uint64_t at = get_u64(m, i * kSlotSize), size = get_u32(m, i * kSlotSize + 8);
    if (at < table || !fits(at, size, m.size()) || get_u32(m, i * kSlotSize + 12) != 0) {
      s.problem = fmt::format("manifest slot {}: record at {} of {} bytes is outside the manifest's records "
                              "({} to {})", i, at, size, table, m.size());
      continue;
    }
    std::optional<Record> r = decode_record(m.subspan(at, size), s.problem);
    if (!r) continue;
    if (s.problem = check_placement(*r); !s.problem.empty()) continue;
    // CPU entries are told apart by their key (its target); cubins by key and arch.
    auto id = std::make_tuple(r->meta.backend, r->meta.key, r->meta.backend == "cpu" ? "" : r->meta.arch);
    if (auto [it, fresh] = seen.emplace(id, i); !fresh) {
      s.problem = fmt::format("duplicate of entry {} ({} {})", it->second, r->meta.key, r->meta.arch);
      continue;
    }
    s.record = std::move(r);
  }
  refuse_shared_payloads();
}

// Each entry owns its stored bytes: records pointing into one payload would make one small
// frame cost its decompression once per record.
void Reader::refuse_shared_payloads() {
  std::vector<std::pair<uint64_t, size_t>> starts;
  for (size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].record) starts.emplace_back(slots_[i].record->payload_offset, i);
  std::sort(starts.begin(), starts.end());
  uint64_t end = 0;
  size_t owner = 0;
  for (const auto& [at, i] : starts) {
    const Record& r = *slots_[i].record;
    if (at < end) {
      slots_[i].problem = fmt::format("payload at {} of {} bytes overlaps entry {}'s", at, r.stored_size, owner);
      slots_[i].record.reset();
      continue;
    }
    end = at + r.stored_size;
    owner = i;
  }
}

std::string Reader::check_placement(const Record& r) const {
  const uint64_t payloads = header_.manifest_offset + header_.manifest_size;
  if (r.payload_offset < payloads || !fits(r.payload_offset, r.stored_size, header_.file_size))
    return fmt::format("payload at {} of {} bytes is outside the payload area ({} to {})", r.payload_offset,
                       r.stored_size, payloads, header_.file_size);
  if (!fits(r.payload_offset, r.stored_size, source_->size()))
    return fmt::format("payload: truncated: it ends at byte {}, the file has {}", r.payload_offset + r.stored_size,
                       source_->size());
  return {};
}

Payload Reader::read(size_t i) const {
  Payload p;
  if (i >= slots_.size()) {
    p.problem = fmt::format("no entry {} (the bundle has {})", i, slots_.size());
    return p;
  }
  if (!slots_[i].record) {
    p.problem = slots_[i].problem;
    return p;
  }
  const Record& r = *slots_[i].record;
  std::vector<uint8_t> stored(r.stored_size);
  if (!source_->read(r.payload_offset, stored)) {
    p.problem = fmt::format("payload: the file ends before byte {} (it shrank after it was opened)",
                            r.payload_offset + r.stored_size);
    return p;
  }
  // The stored bytes are checked before the decompressor sees them.
  if (const uint64_t sum = util::xxh3_64(stored); sum != r.stored_checksum) {
    p.problem = fmt::format("payload: checksum {} (the manifest says {}): the stored bytes are damaged",
                            util::hex64(sum), util::hex64(r.stored_checksum));
    return p;
  }
  if (p.problem = decompress(stored, r.size, p.bytes); !p.problem.empty()) {
    p.bytes.clear();
    return p;
  }
  if (const uint64_t sum = util::xxh3_64(p.bytes); sum != r.checksum) {
    p.problem = fmt::format("payload: decompressed checksum {} (the manifest says {})", util::hex64(sum),
                            util::hex64(r.checksum));
    p.bytes.clear();
  }
  return p;
}

}  // namespace ejk::bundle
