// Element types of tensors crossing the API.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ejk/export.h"

namespace ejk {

enum class DType : uint8_t { f32, bf16, f16, f64, i32, i64, u8 };

EJK_API std::string_view dtype_name(DType t);    // "f32", "bf16", ...
EJK_API size_t dtype_size(DType t);
EJK_API DType parse_dtype(std::string_view s);   // accepts "f32"/"float32"/"fp32", ...; InvalidArgument otherwise
EJK_API bool is_floating(DType t);

}  // namespace ejk
