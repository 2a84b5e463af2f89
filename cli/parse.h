// Strict parsing of CLI option values. CLI11's own conversions accept what a user did not mean
// ("5abc" as 5, "0100" as octal 64, "" as 0), so options are taken as text and parsed here:
// the whole text must be the expected form, and each error is an ejk::InvalidArgument naming
// the option, the expected form and what was given.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

namespace ejk::cli {

// A decimal integer in [min, max]: digits, with a leading '-' only when min < 0. No '+', no
// whitespace, no leading zeros ("0100" is refused, not read as octal or as 100), no suffix.
int64_t parse_int(std::string_view text, std::string_view option, int64_t min, int64_t max);

// A finite decimal number ("30", "-0.5", "1e-3"); no hex floats, inf, nan or trailing text.
double parse_float(std::string_view text, std::string_view option);

// "W" (both sides W) or "L,R", each an integer in [min, max] as parse_int takes it.
struct IntPair {
  int64_t first = 0, second = 0;
};
IntPair parse_int_pair(std::string_view text, std::string_view option, int64_t min, int64_t max);

// "N" or "N,M,...": one or more integers in [min, max], comma-separated, nothing else.
std::vector<int64_t> parse_size_list(std::string_view text, std::string_view option, int64_t min,
                                     int64_t max);

}  // namespace ejk::cli
