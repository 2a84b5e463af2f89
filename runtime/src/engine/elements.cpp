#include "engine/elements.h"

#include <fmt/format.h>

#include <stdexcept>

#include "ejk/core/error.h"
#include "ejk/half.h"

namespace ejk::engine {

double read_as_double(const void* base, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(base)[index];
    case DType::f64: return static_cast<const double*>(base)[index];
    case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(base)[index]);
    case DType::f16: return f16_to_float(static_cast<const uint16_t*>(base)[index]);
    case DType::i32: return static_cast<const int32_t*>(base)[index];
    case DType::i64: return double(static_cast<const int64_t*>(base)[index]);
    default: break;
  }
  throw InvalidArgument(fmt::format("read_as_double: dtype {} has no numeric value (expected f32, f64, bf16, f16, "
                                    "i32 or i64)",
                                    dtype_name(dtype)));
}

FoldedLead fold_lead_dims(const Dims& lead, const TensorView* const* tensors, int count) {
  if (count > FoldedLead::kMaxTensors)
    throw std::logic_error(fmt::format("fold_lead_dims: {} tensors, at most {}", count, FoldedLead::kMaxTensors));
  FoldedLead f;
  for (int64_t i = 0; i < lead.size(); ++i) {
    const int64_t n = lead[i];
    f.count *= n;
    if (n == 1) continue;
    bool fold = f.rank > 0;
    for (int k = 0; k < count && fold; ++k) fold = f.stride[k][f.rank - 1] == tensors[k]->strides[i] * n;
    const int d = fold ? f.rank - 1 : f.rank++;
    f.size[d] = fold ? f.size[d] * n : n;
    for (int k = 0; k < count; ++k) f.stride[k][d] = tensors[k]->strides[i];
  }
  return f;
}

}  // namespace ejk::engine
