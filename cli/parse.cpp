#include "parse.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <optional>
#include <string>

#include "ejk/core/checked.h"
#include "ejk/core/error.h"

namespace ejk::cli {
namespace {

std::string expected_int(int64_t min, int64_t max) {
  return fmt::format("a decimal integer from {} to {}", min, max);
}

[[noreturn]] void fail(std::string_view option, std::string_view expected, std::string_view text) {
  throw InvalidArgument(fmt::format("{}: expected {}, got '{}'", option, expected, text));
}

// Splits on ','; an empty part stays (and then fails to parse).
std::vector<std::string_view> split_commas(std::string_view text) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (;;) {
    size_t comma = text.find(',', start);
    parts.push_back(text.substr(start, comma == std::string_view::npos ? text.npos : comma - start));
    if (comma == std::string_view::npos) return parts;
    start = comma + 1;
  }
}

bool is_decimal_float_char(char c) {
  return (c >= '0' && c <= '9') || c == '.' || c == '-' || c == 'e' || c == 'E';
}

}  // namespace

int64_t parse_int(std::string_view text, std::string_view option, int64_t min, int64_t max) {
  if (auto v = parse_decimal(text, min, max)) return *v;
  fail(option, expected_int(min, max), text);
}

double parse_float(std::string_view text, std::string_view option) {
  constexpr std::string_view kExpected = "a finite decimal number such as 30 or 0.125";
  // from_chars alone would take "inf", "nan" and (with a prefix) hex; allow only these chars.
  bool plain = !text.empty();
  for (char c : text) plain = plain && is_decimal_float_char(c);
  double v = 0;
  if (plain) {
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    plain = ec == std::errc() && end == text.data() + text.size();
  }
  if (!plain || !std::isfinite(v)) fail(option, kExpected, text);
  return v;
}

IntPair parse_int_pair(std::string_view text, std::string_view option, int64_t min, int64_t max) {
  std::vector<std::string_view> parts = split_commas(text);
  std::optional<int64_t> a = parse_decimal(parts[0], min, max);
  std::optional<int64_t> b = parts.size() == 2 ? parse_decimal(parts[1], min, max) : a;
  if (parts.size() > 2 || !a || !b)
    fail(option, fmt::format("W or L,R, each {}", expected_int(min, max)), text);
  return {*a, *b};
}

std::vector<int64_t> parse_size_list(std::string_view text, std::string_view option, int64_t min,
                                     int64_t max) {
  std::vector<int64_t> out;
  for (std::string_view part : split_commas(text)) {
    std::optional<int64_t> v = parse_decimal(part, min, max);
    if (!v) fail(option, fmt::format("a comma-separated list of {}", expected_int(min, max)), text);
    out.push_back(*v);
  }
  return out;
}

}  // namespace ejk::cli
