// Fuzz target: the cache entry reader (header decoding, header and payload checks) and the
// payload check a hit goes through, on arbitrary bytes as an entry file. None of them may
// throw; crashes, out-of-bounds reads and UB are findings.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "cache/entry_format.h"
#include "cache/payload_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> bytes(data, size);
  std::string problem;
  auto header = ejk::cache::decode_header(bytes, problem);
  if (!header) return 0;
  ejk::cache::EntryExpectation expect{header->backend, header->key, header->hash_hex,
                                      header->hash_hex.substr(0, 16)};
  if (!ejk::cache::check_header(*header, expect, size).empty()) return 0;
  if (!ejk::cache::check_payload(*header, bytes).empty()) return 0;
  auto payload = bytes.subspan(header->header_size);
  (void)ejk::cache::check_payload(header->backend, ejk::cache::symbol_for_key(header->key), payload);
  return 0;
}
