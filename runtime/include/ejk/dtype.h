// Element types of tensors crossing the API.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ejk {

enum class DType : uint8_t { f32, bf16, f16, f64, i32, i64, u8 };

std::string_view dtype_name(DType t);    // "f32", "bf16", ...
size_t dtype_size(DType t);
DType parse_dtype(std::string_view s);   // accepts "f32"/"float32"/"fp32", ...; InvalidArgument otherwise
bool is_floating(DType t);

}  // namespace ejk
