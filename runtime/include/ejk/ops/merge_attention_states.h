// ejk::merge_attention_states: merges two partial attention results by their log-sum-exp
// (specs/merge_attention_states.yaml). Split-KV decoding, cascade decoding and ring attention run
// attention over parts of the keys; this gives the result over all of them.
//
// out_a, out_b [..., T, H, D] (f32, bf16 or f16, both the same) and lse_a, lse_b [..., H, T]
// (f32, natural log), in flash_attention's output layouts, with any number of leading dims shared
// by all. Per (..., t, h), with m = max(lse_a, lse_b), wa = exp(lse_a - m), wb = exp(lse_b - m):
//   out = (wa * out_a + wb * out_b) / (wa + wb),  lse = m + log(wa + wb)   (f32 arithmetic)
// Where both LSEs are -inf, out is 0 and lse -inf; where one is, the other side is taken exactly
// and the -inf side's out is not read. Inputs may be strided (head_dim contiguous); out may be
// out_a or out_b itself and lse may be lse_a or lse_b (the same memory and strides: in place).
#pragma once
#include "ejk/export.h"
#include "ejk/tensor.h"
#include "ejk/types.h"

namespace ejk {

struct MergeAttentionStatesResult {
  Tensor out;  // out_a's shape and dtype
  Tensor lse;  // [..., H, T] f32
  RunInfo info;
};

// Allocates the outputs on the inputs' device. Asynchronous on CUDA (ctx.stream).
EJK_API MergeAttentionStatesResult merge_attention_states(const TensorView& out_a, const TensorView& lse_a,
                                                          const TensorView& out_b, const TensorView& lse_b,
                                                          const Context& ctx = {});

// Writes into caller-provided outputs (shapes and dtypes as above, validated).
EJK_API RunInfo merge_attention_states_into(const TensorView& out_a, const TensorView& lse_a, const TensorView& out_b,
                                            const TensorView& lse_b, const TensorView& out, const TensorView& lse,
                                            const Context& ctx = {});

}  // namespace ejk
