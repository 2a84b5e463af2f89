// ejk::mean_pooling: the mean over the token axis (specs/mean_pooling.yaml), and its backward
// (specs/mean_pooling_backward.yaml).
//
// Dense: x [B, T, D] -> out [B, D]. Varlen: packed sequences x [total_tokens, D] with cu_seqlens
// [N + 1] (i32: from 0, non-decreasing, ending at total_tokens) -> out [N, D]. Each row is the
// sum of its sequence's tokens divided by its length; a sequence without tokens gives zeros.
// f32, bf16 and f16, summed in f32; out in x's dtype. The last dim must be contiguous, other
// strides are free.
//
// The backward gives every token of a sequence g / len: g [B, D] -> dx [B, T, D], or g [N, D]
// with cu_seqlens -> dx [total_tokens, D]; a sequence without tokens writes nothing. dx's token
// count (T, or total_tokens) is the size of no input: the allocating form takes it as
// num_tokens, the _into form from dx.
//
// On a GPU, cu_seqlens is read by the kernels only (no device-to-host copy: calls are
// asynchronous on ctx.stream and can be captured in a CUDA graph); on the CPU it is validated.
#pragma once
#include <cstdint>
#include <optional>

#include "ejk/export.h"
#include "ejk/tensor.h"
#include "ejk/types.h"

namespace ejk {

// Allocates out on x's device.
EJK_API Tensor mean_pooling(const TensorView& x, const std::optional<TensorView>& cu_seqlens = std::nullopt,
                            const Context& ctx = {});
// Writes into the caller's out ([B, D] or [N, D], x's dtype; validated).
EJK_API RunInfo mean_pooling_into(const TensorView& x, const std::optional<TensorView>& cu_seqlens,
                                  const TensorView& out, const Context& ctx = {});

// Allocates dx on g's device: num_tokens is T (dense) or total_tokens (varlen).
EJK_API Tensor mean_pooling_backward(const TensorView& g, int64_t num_tokens,
                                     const std::optional<TensorView>& cu_seqlens = std::nullopt,
                                     const Context& ctx = {});
// Writes into the caller's dx ([B, T, D] or [total_tokens, D], g's dtype; validated).
EJK_API RunInfo mean_pooling_backward_into(const TensorView& g, const std::optional<TensorView>& cu_seqlens,
                                           const TensorView& dx, const Context& ctx = {});

}  // namespace ejk
