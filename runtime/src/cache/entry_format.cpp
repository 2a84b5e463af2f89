#include "cache/entry_format.h"

#include <cstring>

#include <fmt/format.h>

#include "cache/disk_cache.h"
#include "cache/entry_names.h"
#include "util/hash.h"
#include "util/le_bytes.h"

namespace ejk::cache {
namespace {

using util::get_u32, util::get_u64, util::put_u32, util::put_u64;

void put_string(std::vector<uint8_t>& out, const std::string& s) {
  out.insert(out.end(), s.begin(), s.end());
}

std::string get_string(std::span<const uint8_t> in, size_t at, size_t n) {
  return std::string(reinterpret_cast<const char*>(in.data() + at), n);
}

// The checksum of a whole entry file (entry_format.h): the fixed fields seed the hash of the rest.
uint64_t entry_checksum(std::span<const uint8_t> file) {
  return util::xxh3_64(file.subspan(kFixedHeaderSize), util::xxh3_64(file.subspan(8, 24)));
}

}  // namespace

std::vector<uint8_t> encode_entry(const std::string& backend, const std::string& key,
                                  const std::string& hash_hex, std::span<const uint8_t> payload) {
  std::vector<uint8_t> out;
  out.reserve(kFixedHeaderSize + backend.size() + key.size() + hash_hex.size() + payload.size());
  for (char c : kEntryMagic) out.push_back(static_cast<uint8_t>(c));
  put_u32(out, static_cast<uint32_t>(kFormatVersion));
  put_u32(out, static_cast<uint32_t>(backend.size()));
  put_u32(out, static_cast<uint32_t>(key.size()));
  put_u32(out, static_cast<uint32_t>(hash_hex.size()));
  put_u64(out, payload.size());
  put_u64(out, 0);  // the checksum, once the rest is written
  put_string(out, backend);
  put_string(out, key);
  put_string(out, hash_hex);
  out.insert(out.end(), payload.begin(), payload.end());
  const uint64_t sum = entry_checksum(out);
  for (int i = 0; i < 8; ++i) out[32 + i] = static_cast<uint8_t>(sum >> (8 * i));
  return out;
}

std::optional<EntryHeader> decode_header(std::span<const uint8_t> bytes, std::string& problem) {
  if (bytes.size() < kFixedHeaderSize) {
    problem = fmt::format("truncated: file has {} bytes, shorter than the {}-byte header",
                          bytes.size(), kFixedHeaderSize);
    return std::nullopt;
  }
  if (std::memcmp(bytes.data(), kEntryMagic, sizeof(kEntryMagic)) != 0) {
    problem = "bad magic (expected \"EJKCACHE\")";
    return std::nullopt;
  }
  EntryHeader h;
  h.format_version = get_u32(bytes, 8);
  if (h.format_version != static_cast<uint32_t>(kFormatVersion)) {
    problem = fmt::format("format version {} (expected {})", h.format_version, kFormatVersion);
    return std::nullopt;
  }
  uint32_t nb = get_u32(bytes, 12), nk = get_u32(bytes, 16), nh = get_u32(bytes, 20);
  if (nb > kMaxFieldLength || nk > kMaxFieldLength || nh > kMaxFieldLength) {
    problem = fmt::format("implausible header field lengths {}/{}/{}", nb, nk, nh);
    return std::nullopt;
  }
  h.header_size = kFixedHeaderSize + nb + nk + nh;
  if (bytes.size() < h.header_size) {
    problem = fmt::format("truncated: file has {} bytes, header needs {}", bytes.size(),
                          h.header_size);
    return std::nullopt;
  }
  h.payload_size = get_u64(bytes, 24);
  h.payload_checksum = get_u64(bytes, 32);
  h.backend = get_string(bytes, kFixedHeaderSize, nb);
  h.key = get_string(bytes, kFixedHeaderSize + nb, nk);
  h.hash_hex = get_string(bytes, kFixedHeaderSize + nb + nk, nh);
  return h;
}

std::string check_header(const EntryHeader& header, const EntryExpectation& expect,
                         uint64_t file_size) {
  // Header strings are quoted through printable(): they come from the file, not from us.
  if (!expect.backend.empty() && header.backend != expect.backend)
    return fmt::format("header backend \"{}\" (expected \"{}\")", names::printable(header.backend),
                       expect.backend);
  if (!expect.key.empty() && header.key != expect.key)
    return fmt::format("header key \"{}\" (expected \"{}\")", names::printable(header.key), expect.key);
  if (!expect.hash_hex.empty() && header.hash_hex != expect.hash_hex)
    return fmt::format("header hash {} (expected {})", names::printable(header.hash_hex), expect.hash_hex);
  if (!expect.hash_prefix.empty() && !header.hash_hex.starts_with(expect.hash_prefix))
    return fmt::format("header hash {} does not start with the file name's {}",
                       names::printable(header.hash_hex), expect.hash_prefix);
  uint64_t expected_size = header.header_size + header.payload_size;
  if (file_size != expected_size)
    return fmt::format("file has {} bytes, header says {} (truncated or extended)", file_size,
                       expected_size);
  return {};
}

std::string check_payload(const EntryHeader& header, std::span<const uint8_t> file_bytes) {
  auto payload = file_bytes.subspan(header.header_size);
  if (payload.size() != header.payload_size)
    return fmt::format("payload has {} bytes, header says {}", payload.size(),
                       header.payload_size);
  uint64_t actual = entry_checksum(file_bytes);
  if (actual != header.payload_checksum)
    return fmt::format("checksum {} (header says {})", util::hex64(actual),
                       util::hex64(header.payload_checksum));
  return {};
}

}  // namespace ejk::cache
