// Fuzz target: the bundle reader (header, manifest slots and records, each entry's payload:
// checksums, zstd frame, size) and the payload check a usable entry then goes through, on
// arbitrary bytes as a bundle file. Only InvalidArgument (a bundle unusable as a whole) may be
// thrown; crashes, out-of-bounds reads, UB and leaks are findings.
//
// Each input is read twice: as it is, and with its checksums recomputed where its structure
// lets them be found, so mutations reach the code past the checksums (record strings, payload
// placement, zstd, the ELF checks) instead of stopping at the first checksum. The seeds
// (fuzz/corpus/bundle) are bundles written by the writer from fuzz/corpus/payload_check's
// object and cubin, which define the kernel of key "k".
#include <zstd.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "bundle/reader.h"
#include "cache/payload_check.h"
#include "ejk/core/error.h"
#include "util/hash.h"

namespace {

using namespace ejk::bundle;

void put_u64_at(std::vector<uint8_t>& b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

bool fits(uint64_t offset, uint64_t size, uint64_t limit) { return offset <= limit && size <= limit - offset; }

// Recomputes a record's payload checksums (when its payload lies in the file and decompresses
// to at most 1 MiB) and then its own checksum.
void repair_record(std::vector<uint8_t>& b, size_t at, size_t size) {
  if (size < kRecordFixedSize + kRecordChecksumSize) return;
  const uint64_t offset = get_u64(b, at), stored = get_u64(b, at + 8), n = get_u64(b, at + 16);
  if (fits(offset, stored, b.size())) {
    const std::span<const uint8_t> payload(b.data() + offset, stored);
    put_u64_at(b, at + 24, ejk::util::xxh3_64(payload));
    if (n > 0 && n <= (1u << 20)) {
      std::vector<uint8_t> out(n);
      const size_t got = ZSTD_decompress(out.data(), out.size(), payload.data(), payload.size());
      if (!ZSTD_isError(got) && got == n) put_u64_at(b, at + 32, ejk::util::xxh3_64(out));
    }
  }
  const size_t body = size - kRecordChecksumSize;
  put_u64_at(b, at + body, ejk::util::xxh3_64(std::span<const uint8_t>(b.data() + at, body)));
}

std::vector<uint8_t> repaired(std::span<const uint8_t> in) {
  std::vector<uint8_t> b(in.begin(), in.end());
  if (b.size() < kHeaderSize) return b;
  const uint64_t manifest = get_u64(b, 56), manifest_size = get_u64(b, 64);
  const uint32_t count = get_u32(b, 72);
  if (fits(manifest, manifest_size, b.size()) && uint64_t(count) * kSlotSize <= manifest_size)
    for (uint32_t i = 0; i < count; ++i) {
      const uint64_t at = get_u64(b, manifest + i * kSlotSize), size = get_u32(b, manifest + i * kSlotSize + 8);
      if (fits(at, size, manifest_size)) repair_record(b, manifest + at, size);
    }
  put_u64_at(b, kHeaderSize - 8, ejk::util::xxh3_64(std::span<const uint8_t>(b.data(), kHeaderSize - 8)));
  return b;
}

void read_all(std::span<const uint8_t> bytes) {
  try {
    const Reader r(std::make_unique<MemorySource>(bytes), "fuzz.ejkb");
    for (size_t i = 0; i < r.slots().size(); ++i) {
      const Payload p = r.read(i);
      if (!p.problem.empty()) continue;
      const EntryMeta& m = r.slots()[i].record->meta;
      (void)ejk::cache::check_payload(m.backend, ejk::cache::symbol_for_key(m.key), p.bytes);
    }
  } catch (const ejk::InvalidArgument&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  read_all(std::span<const uint8_t>(data, size));
  const std::vector<uint8_t> fixed = repaired(std::span<const uint8_t>(data, size));
  read_all(fixed);
  return 0;
}
