// Overflow-checked integer arithmetic for sizes, and strict decimal parsing. A product of
// user-given dims that wraps around allocates a small buffer that a kernel then overruns, so
// every size is computed here and an overflow is an ejk::InvalidArgument naming the argument.
// Header-only and light: used by argument binding, the CLI and the npy reader.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "ejk/core/error.h"

namespace ejk {

namespace detail {
[[noreturn]] inline void throw_overflow(std::string_view what, const char* op, int64_t a,
                                        int64_t b) {
  throw InvalidArgument(std::string(what) + ": size overflows a 64-bit integer (" +
                        std::to_string(a) + " " + op + " " + std::to_string(b) + ")");
}
}  // namespace detail

// a * b, or InvalidArgument "<what>: size overflows ..." when it does not fit in int64.
inline int64_t checked_mul(int64_t a, int64_t b, std::string_view what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) detail::throw_overflow(what, "*", a, b);
  return r;
}

// a + b, or InvalidArgument when it does not fit in int64.
inline int64_t checked_add(int64_t a, int64_t b, std::string_view what) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) detail::throw_overflow(what, "+", a, b);
  return r;
}

// The product of the dims; a negative dim or an overflow is an InvalidArgument naming `what`.
inline int64_t checked_numel(std::span<const int64_t> shape, std::string_view what) {
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0)
      throw InvalidArgument(std::string(what) + ": dimension " + std::to_string(i) +
                            " is negative (" + std::to_string(shape[i]) + ")");
    n = checked_mul(n, shape[i], what);
  }
  return n;
}

// checked_numel(shape) * element_size bytes.
inline int64_t checked_nbytes(std::span<const int64_t> shape, int64_t element_size,
                              std::string_view what) {
  return checked_mul(checked_numel(shape, what), element_size, what);
}

// A decimal integer in [min, max]: optional '-', then digits, nothing else. No '+', no
// whitespace, no leading zeros (so "0100" is neither octal 64 nor 100), no "-0". nullopt when
// `text` is not one or is out of range; callers turn that into a message naming the option.
inline std::optional<int64_t> parse_decimal(std::string_view text, int64_t min, int64_t max) {
  const bool negative = !text.empty() && text.front() == '-';
  const std::string_view digits = negative ? text.substr(1) : text;
  if (digits.empty() || digits.size() > 19) return std::nullopt;
  if (digits.size() > 1 && digits.front() == '0') return std::nullopt;
  uint64_t magnitude = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    magnitude = magnitude * 10 + static_cast<uint64_t>(c - '0');  // 19 digits fit in uint64
  }
  if (negative && magnitude == 0) return std::nullopt;
  const uint64_t limit = static_cast<uint64_t>(INT64_MAX) + (negative ? 1u : 0u);
  if (magnitude > limit) return std::nullopt;
  const int64_t value =
      negative ? static_cast<int64_t>(~magnitude + 1) : static_cast<int64_t>(magnitude);
  if (value < min || value > max) return std::nullopt;
  return value;
}

}  // namespace ejk
