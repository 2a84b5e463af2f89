// Byte layout of one cache entry file, and its verification.
//
//   offset size  field
//        0    8  magic "EJKCACHE"
//        8    4  format version (kFormatVersion)
//       12    4  backend length  B
//       16    4  key length      K
//       20    4  hash length     H
//       24    8  payload size    P
//       32    8  checksum: XXH3-64 of bytes 40.. (strings and payload), seeded with the
//                XXH3-64 of bytes 8..31, so every byte but the magic and itself is covered
//       40    B  backend, then K bytes of key, then H bytes of hash (hex)
//   40+B+K+H P  payload
//
// Integers are little-endian whatever the host, so a cache directory means the same thing
// everywhere. The header repeats backend, key and full hash because the file name carries only
// a 16-character hash prefix: a colliding prefix or a misplaced file is detected, not loaded.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ejk::cache {

inline constexpr char kEntryMagic[8] = {'E', 'J', 'K', 'C', 'A', 'C', 'H', 'E'};
inline constexpr size_t kFixedHeaderSize = 40;
// Names and hashes are short; a larger length means a corrupt header, and rejecting it early
// keeps a flipped bit from turning into a huge read.
inline constexpr uint32_t kMaxFieldLength = 4096;
inline constexpr size_t kMaxHeaderSize = kFixedHeaderSize + 3 * kMaxFieldLength;

struct EntryHeader {
  uint32_t format_version = 0;
  std::string backend, key, hash_hex;
  uint64_t payload_size = 0;
  uint64_t payload_checksum = 0;
  size_t header_size = 0;  // fixed part + strings: where the payload starts
};

// Header followed by payload, ready to be written to disk.
std::vector<uint8_t> encode_entry(const std::string& backend, const std::string& key,
                                  const std::string& hash_hex, std::span<const uint8_t> payload);

// Parses the header. On failure returns nullopt and sets `problem` to a readable reason.
std::optional<EntryHeader> decode_header(std::span<const uint8_t> bytes, std::string& problem);

// What a reader expects an entry to be; empty fields are not checked (listing by file name).
struct EntryExpectation {
  std::string backend, key, hash_hex;
  std::string hash_prefix;  // from the file name: the stored hash must start with it
};

// Empty string when `header` matches `expect` and the file size is consistent; else the reason.
std::string check_header(const EntryHeader& header, const EntryExpectation& expect,
                         uint64_t file_size);

// Empty string when the file's bytes match the header's checksum; else the reason.
std::string check_payload(const EntryHeader& header, std::span<const uint8_t> file_bytes);

}  // namespace ejk::cache
