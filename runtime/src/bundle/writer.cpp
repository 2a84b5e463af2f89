#include "bundle/writer.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <tuple>

#include <fmt/format.h>

#include "cache/posix_io.h"
#include "ejk/core/error.h"
#include "util/hash.h"

namespace ejk::bundle {
namespace {

// CPU entries are told apart by their key (its target); cubins by key and arch.
std::tuple<std::string, std::string, std::string> identity(const EntryMeta& m) {
  return {m.backend, m.key, m.backend == "cpu" ? std::string() : m.arch};
}

void check_meta(const EntryMeta& m) {
  const std::pair<std::string_view, const std::string*> fields[] = {
      {"backend", &m.backend}, {"key", &m.key},           {"target", &m.target},
      {"arch", &m.arch},       {"compiler", &m.compiler}, {"content hash", &m.content_hash}};
  for (const auto& [name, value] : fields) {
    if (value->size() > kMaxStringSize)
      throw InvalidArgument(fmt::format("bundle entry {}: {} of {} bytes (at most {})", m.key, name, value->size(),
                                        kMaxStringSize));
    if (std::string why = check_name(name, *value); !why.empty())
      throw InvalidArgument(fmt::format("bundle entry {}: {}", printable(m.key), why));
  }
}

}  // namespace

Entry make_entry(EntryMeta meta, std::span<const uint8_t> binary) {
  check_meta(meta);
  if (binary.empty() || binary.size() > kMaxEntrySize)
    throw InvalidArgument(fmt::format("bundle entry {}: a binary of {} bytes (expected 1 to {})", meta.key,
                                      binary.size(), kMaxEntrySize));
  Entry e;
  e.meta = std::move(meta);
  e.stored.resize(ZSTD_compressBound(binary.size()));
  const size_t n = ZSTD_compress(e.stored.data(), e.stored.size(), binary.data(), binary.size(), kCompressionLevel);
  if (ZSTD_isError(n))
    throw Error(fmt::format("bundle entry {}: zstd could not compress it: {}", e.meta.key, ZSTD_getErrorName(n)));
  e.stored.resize(n);
  e.size = binary.size();
  e.checksum = util::xxh3_64(binary);
  e.stored_checksum = util::xxh3_64(e.stored);
  return e;
}

std::vector<uint8_t> encode_bundle(std::vector<Entry> entries, const std::string& generator_version) {
  if (entries.size() > kMaxEntries)
    throw InvalidArgument(fmt::format("bundle: {} entries (at most {})", entries.size(), kMaxEntries));
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return identity(a.meta) < identity(b.meta); });
  for (size_t i = 1; i < entries.size(); ++i)
    if (identity(entries[i - 1].meta) == identity(entries[i].meta))
      throw InvalidArgument(fmt::format("bundle: entry {} ({}) is given twice", entries[i].meta.key,
                                        entries[i].meta.arch));
  // Records need their payload offsets, which follow the manifest: sizes first, bytes second.
  std::vector<Record> records(entries.size());
  uint64_t records_size = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    records[i] = {entries[i].meta, 0, entries[i].stored.size(), entries[i].size, entries[i].stored_checksum,
                  entries[i].checksum};
    records_size += encode_record(records[i]).size();
  }
  Header h;
  h.generator_version = generator_version;
  h.entry_count = static_cast<uint32_t>(entries.size());
  h.manifest_size = entries.size() * kSlotSize + records_size;
  uint64_t at = h.manifest_offset + h.manifest_size;
  for (size_t i = 0; i < entries.size(); ++i) {
    records[i].payload_offset = at;
    at += entries[i].stored.size();
  }
  h.file_size = at;
  std::vector<uint8_t> out = encode_header(h);
  uint64_t record_at = entries.size() * kSlotSize;
  std::vector<std::vector<uint8_t>> encoded;
  for (const Record& r : records) {
    encoded.push_back(encode_record(r));
    put_u64(out, record_at);
    put_u32(out, static_cast<uint32_t>(encoded.back().size()));
    put_u32(out, 0);
    record_at += encoded.back().size();
  }
  for (const auto& r : encoded) out.insert(out.end(), r.begin(), r.end());
  for (const Entry& e : entries) out.insert(out.end(), e.stored.begin(), e.stored.end());
  return out;
}

void check_output_path(const std::filesystem::path& path, std::string_view option) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    throw InvalidArgument(fmt::format("{} {}: {}", option, path.string(), std::strerror(errno)));
  }
  const char* kind = S_ISLNK(st.st_mode) ? "a symlink" : S_ISDIR(st.st_mode) ? "a directory"
                     : S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                     : !S_ISREG(st.st_mode) ? "not a regular file" : st.st_uid != ::geteuid() ? "another user's file"
                     : nullptr;
  if (kind)
    throw InvalidArgument(fmt::format("{} {}: is {}; expected a new path or a regular file of this user", option,
                                      path.string(), kind));
}

void write_bundle(const std::filesystem::path& path, std::span<const uint8_t> bytes) {
  check_output_path(path, "bundle");
  std::string note = cache::io::write_file_atomic(path, bytes);
  (void)note;  // the bundle is in place; a directory fsync that failed only delays durability
}

}  // namespace ejk::bundle
