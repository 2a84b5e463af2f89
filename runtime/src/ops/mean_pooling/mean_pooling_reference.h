// The float64 reference of mean pooling and its backward: per sequence, a plain sum in double
// over its tokens (mean_pool_span, the kernels' own definition of a sequence's tokens).
#pragma once
#include "ejk/dtype.h"
#include "ejk/kernels/common/mean_pooling_params.h"

namespace ejk {

// Forward (backward false): out[s * dim + d], contiguous [sequences, dim], from p.tokens.
// Backward: out[i * dim + d], contiguous in dx's shape (i the packed token index), from p.rows;
// tokens of no sequence stay as they are. Elements are read as `dtype` through p's strides.
void reference_mean_pool(const MeanPoolParams& p, bool backward, DType dtype, double* out);

}  // namespace ejk
