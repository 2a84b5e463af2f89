// Writing a bundle (bundle/format.h): entries are compressed one by one (on the build's worker
// threads), then laid out in a stable order and written atomically.
#pragma once
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bundle/format.h"

namespace ejk::bundle {

// zstd's level for payloads: kernels are small (objects ~10 KB, cubins ~100 KB), so the
// strongest regular level costs milliseconds per entry and decompresses as fast as any.
inline constexpr int kCompressionLevel = 19;

struct Entry {
  EntryMeta meta;
  std::vector<uint8_t> stored;  // one zstd frame
  uint64_t size = 0, checksum = 0, stored_checksum = 0;
};

// Compresses and checksums one binary; thread-safe. InvalidArgument when a name in `meta`
// is not acceptable (check_name) or the binary is empty or larger than kMaxEntrySize.
Entry make_entry(EntryMeta meta, std::span<const uint8_t> binary);

// The whole file: header, manifest, payloads, entries sorted by (backend, key, arch), so the
// same entries give the same bytes. InvalidArgument for two entries with the same identity.
std::vector<uint8_t> encode_bundle(std::vector<Entry> entries, const std::string& generator_version);

// InvalidArgument unless `path` is free or a regular file of this user (not a symlink, device
// node, FIFO or directory, nor another user's file): what a bundle may replace.
void check_output_path(const std::filesystem::path& path, std::string_view option);

// Writes `bytes` to `path` atomically (a temp file beside it, fsync, rename); ejk::Error
// naming the path on failure.
void write_bundle(const std::filesystem::path& path, std::span<const uint8_t> bytes);

}  // namespace ejk::bundle
