#include "bundle/format.h"

#include <cstring>

#include <fmt/format.h>

#include "util/hash.h"

namespace ejk::bundle {
namespace {

constexpr size_t kStringCount = 6;
constexpr size_t kHeaderChecksumAt = kHeaderSize - 8;

std::array<const std::string*, kStringCount> strings_of(const EntryMeta& m) {
  return {&m.backend, &m.key, &m.target, &m.arch, &m.compiler, &m.content_hash};
}

std::array<std::string*, kStringCount> strings_of(EntryMeta& m) {
  return {&m.backend, &m.key, &m.target, &m.arch, &m.compiler, &m.content_hash};
}

constexpr std::array<std::string_view, kStringCount> kStringNames = {"backend", "key",      "target",
                                                                     "arch",    "compiler", "content hash"};

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-';
}

// The generator version field: printable ASCII, then NULs to the end.
std::optional<std::string> read_generator_version(std::span<const uint8_t> field) {
  std::string out;
  size_t i = 0;
  for (; i < field.size() && field[i] != 0; ++i) {
    if (field[i] < 0x20 || field[i] >= 0x7f) return std::nullopt;
    out.push_back(static_cast<char>(field[i]));
  }
  for (; i < field.size(); ++i)
    if (field[i] != 0) return std::nullopt;
  return out;
}

}  // namespace

std::vector<uint8_t> encode_header(const Header& h) {
  std::vector<uint8_t> out(kMagic.begin(), kMagic.end());
  put_u32(out, h.format_version);
  put_u32(out, static_cast<uint32_t>(kHeaderSize));
  std::string version = h.generator_version.substr(0, kGeneratorVersionSize);
  version.resize(kGeneratorVersionSize, '\0');
  out.insert(out.end(), version.begin(), version.end());
  put_u64(out, h.file_size);
  put_u64(out, h.manifest_offset);
  put_u64(out, h.manifest_size);
  put_u32(out, h.entry_count);
  out.resize(kHeaderChecksumAt, 0);
  put_u64(out, util::xxh3_64(out));
  return out;
}

std::vector<uint8_t> encode_record(const Record& r) {
  std::vector<uint8_t> out;
  put_u64(out, r.payload_offset);
  put_u64(out, r.stored_size);
  put_u64(out, r.size);
  put_u64(out, r.stored_checksum);
  put_u64(out, r.checksum);
  for (const std::string* s : strings_of(r.meta)) put_u16(out, static_cast<uint16_t>(s->size()));
  put_u32(out, 0);
  for (const std::string* s : strings_of(r.meta)) out.insert(out.end(), s->begin(), s->end());
  put_u64(out, util::xxh3_64(out));
  return out;
}

std::optional<Header> decode_header(std::span<const uint8_t> bytes, std::string& problem) {
  if (bytes.size() < kHeaderSize) {
    problem = fmt::format("header: truncated: the file has {} bytes, the header needs {}", bytes.size(), kHeaderSize);
    return std::nullopt;
  }
  if (std::memcmp(bytes.data(), kMagic.data(), kMagic.size()) != 0) {
    problem = "header: not an ejk bundle (magic is not \"EJKBUNDL\")";
    return std::nullopt;
  }
  Header h;
  h.format_version = get_u32(bytes, 8);
  const auto generator = read_generator_version(bytes.subspan(16, kGeneratorVersionSize));
  const std::string written_by = generator ? fmt::format("generator {}", *generator) : "an unreadable generator version";
  if (h.format_version > kFormatVersion) {
    problem = fmt::format("header: format version {} is newer than this library reads (version {}); the bundle "
                          "was written by {}: load it with a newer ejkernel or rebuild it with this one",
                          h.format_version, kFormatVersion, written_by);
    return std::nullopt;
  }
  if (h.format_version != kFormatVersion) {
    problem = fmt::format("header: format version {} (expected {})", h.format_version, kFormatVersion);
    return std::nullopt;
  }
  const uint64_t stored = get_u64(bytes, kHeaderChecksumAt);
  const uint64_t actual = util::xxh3_64(bytes.first(kHeaderChecksumAt));
  if (stored != actual) {
    problem = fmt::format("header: checksum {} (the header says {}): the header is damaged", util::hex64(actual),
                          util::hex64(stored));
    return std::nullopt;
  }
  if (get_u32(bytes, 12) != kHeaderSize || !generator) {
    problem = fmt::format("header: header size {} and generator version field are not those of format {}",
                          get_u32(bytes, 12), kFormatVersion);
    return std::nullopt;
  }
  h.generator_version = *generator;
  h.file_size = get_u64(bytes, 48);
  h.manifest_offset = get_u64(bytes, 56);
  h.manifest_size = get_u64(bytes, 64);
  h.entry_count = get_u32(bytes, 72);
  if (h.entry_count > kMaxEntries) {
    problem = fmt::format("header: entry count {} (at most {})", h.entry_count, kMaxEntries);
    return std::nullopt;
  }
  if (h.manifest_offset != kHeaderSize || h.manifest_size < uint64_t(h.entry_count) * kSlotSize ||
      h.manifest_size > h.file_size - std::min<uint64_t>(h.file_size, kHeaderSize)) {
    problem = fmt::format("header: manifest at {} of {} bytes for {} entries does not fit a file of {} bytes",
                          h.manifest_offset, h.manifest_size, h.entry_count, h.file_size);
    return std::nullopt;
  }
  return h;
}

std::optional<Record> decode_record(std::span<const uint8_t> bytes, std::string& problem) {
  if (bytes.size() < kRecordFixedSize + kRecordChecksumSize) {
    problem = fmt::format("record of {} bytes, shorter than the fixed {}", bytes.size(),
                          kRecordFixedSize + kRecordChecksumSize);
    return std::nullopt;
  }
  const size_t body = bytes.size() - kRecordChecksumSize;
  const uint64_t stored = get_u64(bytes, body), actual = util::xxh3_64(bytes.first(body));
  if (stored != actual) {
    problem = fmt::format("record checksum {} (the record says {}): the manifest record is damaged",
                          util::hex64(actual), util::hex64(stored));
    return std::nullopt;
  }
  Record r;
  r.payload_offset = get_u64(bytes, 0);
  r.stored_size = get_u64(bytes, 8);
  r.size = get_u64(bytes, 16);
  r.stored_checksum = get_u64(bytes, 24);
  r.checksum = get_u64(bytes, 32);
  size_t at = kRecordFixedSize;
  auto strings = strings_of(r.meta);
  for (size_t i = 0; i < kStringCount; ++i) {
    const size_t n = get_u16(bytes, 40 + 2 * i);
    if (n > kMaxStringSize || n > body - at) {
      problem = fmt::format("record: {} of {} bytes overruns the record ({} bytes left)", kStringNames[i], n, body - at);
      return std::nullopt;
    }
    strings[i]->assign(reinterpret_cast<const char*>(bytes.data() + at), n);
    at += n;
  }
  if (at != body) {
    problem = fmt::format("record: {} bytes after the strings (expected none)", body - at);
    return std::nullopt;
  }
  for (size_t i = 0; i < kStringCount; ++i)
    if (std::string why = check_name(kStringNames[i], *strings[i]); !why.empty()) {
      problem = "record: " + why;
      return std::nullopt;
    }
  if (r.size == 0 || r.size > kMaxEntrySize || r.stored_size == 0) {
    problem = fmt::format("record: size {} stored in {} bytes (expected 1 to {} bytes)", r.size, r.stored_size,
                          kMaxEntrySize);
    return std::nullopt;
  }
  if (problem = check_entry_size(r); !problem.empty()) return std::nullopt;
  return r;
}

std::string check_entry_size(const Record& r) {
  const uint64_t limit = r.meta.backend == "cpu" ? kMaxCpuObjectSize : r.meta.backend == "cuda" ? kMaxCubinSize : 0;
  if (limit == 0) return fmt::format("record: backend \"{}\": a bundle holds cpu or cuda entries", printable(r.meta.backend));
  if (r.size > limit)
    return fmt::format("record: a {} entry of {} bytes (at most {} bytes)", r.meta.backend, r.size, limit);
  if (r.size > kRatioFloor && r.size / kMaxCompressionRatio > r.stored_size)
    return fmt::format("record: {} bytes stored in {} (more than {}x compression: not a kernel binary)", r.size,
                       r.stored_size, kMaxCompressionRatio);
  return {};
}

std::string check_name(std::string_view field, std::string_view value) {
  if (field == "compiler") {
    if (value.empty() || value.find('\0') != std::string_view::npos)
      return "compiler: empty or holds a NUL byte";
    return {};
  }
  if (field == "content hash") {
    if (value.size() != 32 || !util::is_lower_hex(value))
      return fmt::format("content hash \"{}\": expected 32 lowercase hex digits", printable(value));
    return {};
  }
  bool ok = !value.empty() && value != "." && value != "..";
  for (char c : value) ok = ok && is_name_char(c);
  if (!ok) return fmt::format("{} \"{}\": expected a name of [A-Za-z0-9._-]", field, printable(value));
  return {};
}

std::string printable(std::string_view text) {
  std::string out;
  for (char c : text) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return out;
}

}  // namespace ejk::bundle
