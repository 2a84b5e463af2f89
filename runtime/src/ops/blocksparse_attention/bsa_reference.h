// The float64 reference of block-sparse attention, forward and backward: dense attention over
// every (query, key) pair with the token mask written out pair by pair (layout block, position,
// segments), independent of the block lists the kernels walk. The backward recomputes the
// probabilities from scratch (the kernels' out and lse are not read).
#pragma once
#include "ejk/dtype.h"
#include "ejk/kernels/common/flash_params.h"
#include "ejk/tensor.h"

namespace ejk::ops {

struct BlocksparseReferenceProblem {
  FlashFwdParams p;                       // q, k, v, segment ids, sinks, scale, cap, mask; BHSD strides
  DType dtype = DType::f32;
  const TensorView* block_mask = nullptr;  // null: every block
  int64_t block_q = 64, block_k = 64;
};

// out [B, Hq, Sq, D] and lse [B, Hq, Sq], contiguous. A row with no visible key has out 0
// (and lse the log-sum-exp of its sinks, -inf without).
void reference_blocksparse_fwd(const BlocksparseReferenceProblem& pr, double* out, double* lse);

// Gradients, contiguous in their inputs' shapes; d_out read through its strides
// [B, Hq, Sq, D], d_lse contiguous [B, Hq, Sq] or null. dsoftmax_aux null: not wanted.
struct BlocksparseReferenceGrads {
  const void* d_out = nullptr;
  int64_t do_stride_b = 0, do_stride_h = 0, do_stride_s = 0;
  const float* d_lse = nullptr;
  double *dq = nullptr, *dk = nullptr, *dv = nullptr, *dsoftmax_aux = nullptr;
};
void reference_blocksparse_bwd(const BlocksparseReferenceProblem& pr, const BlocksparseReferenceGrads& g);

}  // namespace ejk::ops
