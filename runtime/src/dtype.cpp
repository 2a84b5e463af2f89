#include "ejk/dtype.h"

#include <fmt/format.h>

#include "ejk/core/error.h"

namespace ejk {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::f64: return "f64";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
  }
  return "?";
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::bf16:
    case DType::f16: return 2;
    case DType::f32:
    case DType::i32: return 4;
    case DType::f64:
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  return 0;
}

bool is_floating(DType t) {
  return t == DType::f32 || t == DType::bf16 || t == DType::f16 || t == DType::f64;
}

DType parse_dtype(std::string_view s) {
  struct Alias { std::string_view name; DType t; };
  static constexpr Alias kAliases[] = {
      {"f32", DType::f32},   {"fp32", DType::f32},    {"float32", DType::f32},
      {"bf16", DType::bf16}, {"bfloat16", DType::bf16},
      {"f16", DType::f16},   {"fp16", DType::f16},    {"float16", DType::f16},
      {"f64", DType::f64},   {"float64", DType::f64}, {"i32", DType::i32},
      {"int32", DType::i32}, {"i64", DType::i64},     {"int64", DType::i64},
      {"u8", DType::u8},     {"uint8", DType::u8}};
  for (const auto& a : kAliases)
    if (a.name == s) return a.t;
  throw InvalidArgument(
      fmt::format("dtype: unknown '{}', expected one of f32, bf16, f16, f64, i32, i64, u8", s));
}

}  // namespace ejk
