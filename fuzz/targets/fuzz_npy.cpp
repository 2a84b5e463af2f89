// Fuzz target: the .npy header reader, given the input as a whole file. Any input may be
// rejected with an InvalidArgument; anything else is a finding. An accepted layout must lie
// inside the file.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "ejk/core/error.h"
#include "npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto layout = ejk::cli::parse_npy_header(std::span<const uint8_t>(data, size), size, "fuzz.npy");
    if (layout.data_offset > size || layout.data_bytes != size - layout.data_offset) std::abort();
  } catch (const ejk::InvalidArgument&) {
  }
  return 0;
}
