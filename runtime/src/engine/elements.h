// Helpers an op's code needs on bound tensors: one element read as double (the references),
// and the leading ("...") dims folded into as few strided dims as the tensors' strides allow
// (the kernels' index arithmetic).
#pragma once
#include <cstdint>

#include "ejk/tensor.h"

namespace ejk::engine {

// Element `index` (in elements from `base`) of dtype f32, f64, bf16, f16, i32 or i64, exactly
// as a double (i64 beyond 2^53 rounds). InvalidArgument naming the dtype for any other.
double read_as_double(const void* base, DType dtype, int64_t index);
inline double read_as_double(const TensorView& t, int64_t index) { return read_as_double(t.data, t.dtype, index); }

// The leading dims of `count` tensors (dims 0..lead.size()-1 of each, outermost first) with
// size-1 dims dropped and each dim merged into the one before it where, in every tensor, the
// outer stride is the inner stride times the inner size.
struct FoldedLead {
  static constexpr int kMaxTensors = 8;
  int rank = 0;
  int64_t size[Dims::kMaxRank] = {};
  int64_t stride[kMaxTensors][Dims::kMaxRank] = {};  // [tensor][folded dim]
  int64_t count = 1;                                  // product of the leading dims
};
FoldedLead fold_lead_dims(const Dims& lead, const TensorView* const* tensors, int count);

}  // namespace ejk::engine
