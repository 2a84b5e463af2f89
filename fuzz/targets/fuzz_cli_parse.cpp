// Fuzz target: the CLI's strict option parsers (cli/parse.h). The first byte picks the parser
// and its range, the rest is the option's text. InvalidArgument is the only acceptable failure,
// and an accepted value must lie in the range asked for.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "ejk/core/error.h"
#include "parse.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const bool wide = data[0] & 0x10;
  const int64_t lo = wide ? INT64_MIN : 0, hi = wide ? INT64_MAX : int64_t{1} << 40;
  try {
    switch (data[0] % 4) {
      case 0: {
        const int64_t v = ejk::cli::parse_int(text, "--b", lo, hi);
        if (v < lo || v > hi) std::abort();
        break;
      }
      case 1:
        if (!std::isfinite(ejk::cli::parse_float(text, "--scale"))) std::abort();
        break;
      case 2: {
        const auto p = ejk::cli::parse_int_pair(text, "--window", lo, hi);
        if (p.first < lo || p.first > hi || p.second < lo || p.second > hi) std::abort();
        break;
      }
      default:
        for (int64_t v : ejk::cli::parse_size_list(text, "--sizes", lo, hi))
          if (v < lo || v > hi) std::abort();
    }
  } catch (const ejk::InvalidArgument&) {
  }
  return 0;
}
