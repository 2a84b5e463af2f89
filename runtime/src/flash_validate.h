// Argument checking for ejk::flash_attention: turns user tensors into FlashFwdParams, or throws
// InvalidArgument naming the argument and what was expected.
#pragma once
#include <vector>

#include "ejk/flash_attention.h"
#include "ejk/kernels/common/flash_params.h"

namespace ejk::detail {

// Shapes and flags the op derived from its inputs; everything the key and launch need.
struct FlashProblem {
  FlashFwdParams params{};
  DType dtype = DType::f32;
  Device device{};
  bool varlen = false;
  bool window = false, softcap = false, sinks = false, bias = false, segments = false;
  std::vector<int64_t> out_shape;  // q's shape
  std::vector<int64_t> lse_shape;  // [B, Hq, Sq] or [1, Hq, total_q]
  std::vector<float> sinks_f32;    // softmax_aux converted to float32 [Hq, num_sinks]
};

// Validates inputs and options and fills everything but the output pointers.
FlashProblem check_flash_inputs(const FlashAttentionInputs& in, const FlashAttentionOptions& opt);

// Validates caller-provided outputs against the problem and sets their pointers/strides.
void bind_flash_outputs(FlashProblem& pb, const TensorView& out, const TensorView& lse);

}  // namespace ejk::detail
