// The float64 reference of NSA's selection attention, forward and backward: per (sequence,
// token, head) a dense softmax over every key, each key's visibility decided on its own (j <= t
// and some counted slot names j's block), independent of the kernels' deduplicated block walk.
// The backward recomputes the probabilities (the kernels' out and lse are not read).
#pragma once
#include "ejk/dtype.h"
#include "ejk/kernels/common/nsa_params.h"

namespace ejk::ops {

// out [B, T, Hq, D] and lse [B, T, Hq], contiguous; a token with no key has out 0, lse -inf.
void reference_nsa_fwd(const NsaParams& p, DType dtype, double* out, double* lse);

// dq, dk, dv contiguous in q's, k's and v's shapes; d_out read through p's strides.
void reference_nsa_bwd(const NsaParams& p, DType dtype, double* dq, double* dk, double* dv);

}  // namespace ejk::ops
