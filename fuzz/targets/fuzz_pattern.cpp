// Fuzz target: the linear-time matcher for user patterns (ejk/core/pattern.h). The input is a
// pattern, a NUL byte, then a text. A pattern may be refused with InvalidArgument; an accepted
// one must search any text without a crash, and (libFuzzer's -timeout) without taking long.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ejk/core/error.h"
#include "ejk/core/pattern.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t nul = all.find('\0');
  const std::string_view pattern = all.substr(0, nul), text = nul == all.npos ? all : all.substr(nul + 1);
  try {
    const ejk::Pattern p(pattern, "fuzz");
    (void)p.search(text);
  } catch (const ejk::InvalidArgument&) {
  }
  return 0;
}
