// ejk::flash_attention: the flash attention forward op (specs/flash_attention.yaml).
//
// q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D] (Hq a multiple of Hkv: GQA/MQA), or packed varlen
// sequences q [total_q, Hq, D] / [1, total_q, Hq, D] with cum_seqlens_q/k. Semantics of every
// option are those of kernels/ejk/kernels/common/mask.h. Returns out (q's shape and dtype) and
// lse [B, Hq, Sq] in float32 (varlen: [1, Hq, total_q]).
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "ejk/export.h"
#include "ejk/tensor.h"
#include "ejk/types.h"

namespace ejk {

struct SlidingWindow {
  int64_t left = 0, right = 0;
  static SlidingWindow symmetric(int64_t w) { return {w, w}; }
};

struct FlashAttentionOptions {
  std::optional<float> softmax_scale;           // default 1/sqrt(D)
  bool causal = false;                          // top-left aligned
  std::optional<SlidingWindow> sliding_window;  // keys in [q - left, q + right]
  std::optional<float> logits_soft_cap;         // cap * tanh(s / cap); cap > 0
  bool normalize_output = true;
  // Varlen: the longest sequences. Without them the runtime reads host cum_seqlens, or for
  // device cum_seqlens takes the packed totals (correct, but it launches work for rows no
  // sequence has): pass them on the GPU.
  std::optional<int64_t> max_seqlen_q, max_seqlen_k;
  // Block sizes; 0 = the spec's heuristic.
  int64_t block_q = 0, block_k = 0;
};

struct FlashAttentionInputs {
  TensorView q, k, v;
  std::optional<TensorView> bias;            // [B|1, Hq|1, Sq, Sk], q's dtype
  std::optional<TensorView> q_segment_ids;   // [B, Sq] i32, -1 = padding
  std::optional<TensorView> kv_segment_ids;  // [B, Sk] i32
  std::optional<TensorView> cum_seqlens_q;   // [N + 1] i32, from 0, non-decreasing, to total_q
  std::optional<TensorView> cum_seqlens_k;   // [N + 1] i32
  // Attention sinks, f32, as the seed takes them: [S] shared by every head, or [Hq, S].
  std::optional<TensorView> softmax_aux;
};

struct FlashAttentionResult {
  Tensor out;
  Tensor lse;
  RunInfo info;
};

// Allocates the outputs on the inputs' device. Asynchronous on CUDA (ctx.stream).
EJK_API FlashAttentionResult flash_attention(const FlashAttentionInputs& in, const FlashAttentionOptions& opt = {},
                                             const Context& ctx = {});

// Writes into caller-provided outputs (shapes and dtypes as above, validated). The call
// frameworks make: no allocation, no synchronisation, microseconds of host time.
EJK_API RunInfo flash_attention_into(const FlashAttentionInputs& in, const FlashAttentionOptions& opt,
                                     const TensorView& out, const TensorView& lse, const Context& ctx = {});

// The float64 reference (CPU tensors): the same checks and mask definitions (mask.h) as the
// kernels, a plain two-pass softmax in double. out contiguous in q's shape, lse as above.
struct FlashAttentionReference {
  std::vector<double> out, lse;
};
EJK_API FlashAttentionReference flash_attention_reference(const FlashAttentionInputs& in,
                                                          const FlashAttentionOptions& opt = {});

}  // namespace ejk
