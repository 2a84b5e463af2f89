// The byte layout of a kernel bundle (.ejkb): precompiled variants in one file.
//
//   header    128 bytes at offset 0
//   manifest  at the header's manifest offset: one 16-byte slot per entry, then the records
//   payloads  each entry's binary, zstd-compressed, where its record says
//
// Header (little-endian; the first 48 bytes keep this layout in every format version, so any
// library can name a newer bundle's versions):
//     0   8  magic "EJKBUNDL"
//     8   4  format version
//    12   4  header size (128)
//    16  32  generator version, ASCII, NUL-padded
//    48   8  file size
//    56   8  manifest offset
//    64   8  manifest size
//    72   4  entry count
//    76  44  zero (reserved)
//   120   8  XXH3-64 of bytes 0..120
//
// Manifest slot i: 8 bytes record offset (from the manifest's start), 4 bytes record size,
// 4 bytes zero. A record:
//     0   8  payload offset (in the file)
//     8   8  stored (compressed) size
//    16   8  size
//    24   8  XXH3-64 of the stored bytes
//    32   8  XXH3-64 of the decompressed bytes
//    40  12  six 2-byte string lengths: backend, key, target, arch, compiler, content hash
//    52   4  zero (reserved)
//    56   .  the six strings, then 8 bytes: XXH3-64 of the record before them
//
// Each record carries its own checksum and each payload two, so damage to one entry's record
// or payload makes only that entry unusable. Nothing read from a file is trusted before it is
// checked: every offset and size against the file, every length against its limit.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "util/le_bytes.h"

namespace ejk::bundle {

inline constexpr std::array<char, 8> kMagic = {'E', 'J', 'K', 'B', 'U', 'N', 'D', 'L'};
inline constexpr uint32_t kFormatVersion = 1;
inline constexpr size_t kHeaderSize = 128;
inline constexpr size_t kGeneratorVersionSize = 32;
inline constexpr size_t kSlotSize = 16;
inline constexpr size_t kRecordFixedSize = 56;
inline constexpr size_t kRecordChecksumSize = 8;
// Limits that keep a flipped bit from becoming a huge allocation.
inline constexpr uint32_t kMaxEntries = 1u << 20;
inline constexpr size_t kMaxStringSize = 4096;
inline constexpr uint64_t kMaxEntrySize = uint64_t(64) << 20;  // a decompressed binary, any kind
// What a decompressed entry may be: a CPU object or a cubin of one variant is ~10-100 KB, so
// these leave two orders of magnitude of room and still keep a crafted frame of zeros from
// costing seconds and gigabytes per entry. Backends other than cpu and cuda have no entries.
inline constexpr uint64_t kMaxCpuObjectSize = uint64_t(16) << 20;
inline constexpr uint64_t kMaxCubinSize = uint64_t(64) << 20;
// Decompressed size over stored size: real objects compress 3-10x; runs of zeros compress
// thousands of times. Payloads below kRatioFloor are exempt (tiny frames have a fixed cost).
inline constexpr uint64_t kMaxCompressionRatio = 64;
inline constexpr uint64_t kRatioFloor = uint64_t(1) << 20;

struct Header {
  uint32_t format_version = kFormatVersion;
  std::string generator_version;
  uint64_t file_size = 0;
  uint64_t manifest_offset = kHeaderSize;
  uint64_t manifest_size = 0;
  uint32_t entry_count = 0;
};

// What identifies an entry and what it must be: the manifest's record without its placement.
struct EntryMeta {
  std::string backend;       // "cpu", "cuda"
  std::string key;           // canonical variant key
  std::string target;        // the key's spec target ("avx512", "sm90a")
  std::string arch;          // CPU: the -march it was compiled for; CUDA: the cubin's ("sm_90a")
  std::string compiler;      // the compiler identity that went into content_hash
  std::string content_hash;  // the runtime's hash of everything that determines the binary
};

struct Record {
  EntryMeta meta;
  uint64_t payload_offset = 0, stored_size = 0, size = 0;
  uint64_t stored_checksum = 0, checksum = 0;
};

using util::get_u16, util::get_u32, util::get_u64, util::put_u16, util::put_u32, util::put_u64;

std::vector<uint8_t> encode_header(const Header& h);
std::vector<uint8_t> encode_record(const Record& r);

// The header from its 128 bytes, or why not: names the field and what was expected. A newer
// format version is refused here, naming both versions and the bundle's generator.
std::optional<Header> decode_header(std::span<const uint8_t> bytes, std::string& problem);

// Why a record's sizes cannot be an entry of its backend (too large for its kind, or a
// compression ratio no binary has), or empty.
std::string check_entry_size(const Record& r);

// One record from its bytes (exactly the slot's size), or why not.
std::optional<Record> decode_record(std::span<const uint8_t> bytes, std::string& problem);

// Why a string of a record is not acceptable for its field, or empty. Names (backend, key,
// target, arch) are [A-Za-z0-9._-] only, so they are safe as file names; the content hash is
// lowercase hex; the compiler identity is printable ASCII.
std::string check_name(std::string_view field, std::string_view value);

// Non-printable bytes as '?': names from a file quoted in messages.
std::string printable(std::string_view text);

}  // namespace ejk::bundle
