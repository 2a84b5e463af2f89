// Fuzz target: check_payload's ELF reader on arbitrary bytes, as a CPU object and as a cubin,
// for the kernel "ejk_k" (the symbol the seed object and cubin define). It never throws;
// crashes, out-of-bounds reads and UB are findings.
#include <cstddef>
#include <cstdint>
#include <span>

#include "cache/payload_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> bytes(data, size);
  (void)ejk::cache::check_payload("cpu", "ejk_k", bytes);
  (void)ejk::cache::check_payload("cuda", "ejk_k", bytes);
  return 0;
}
