// Fuzz target: spec text through OpSchema::parse (YAML reading, every key's checks,
// expressions, constraints). Any input may be rejected with a SpecError; any other exception
// (a raw yaml-cpp or standard-library one reaches users as "internal error"), crash or UB is a
// finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ejk/core/error.h"
#include "ejk/core/schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    (void)ejk::OpSchema::parse(text, "fuzz.yaml");
  } catch (const ejk::SpecError&) {
  }
  return 0;
}
