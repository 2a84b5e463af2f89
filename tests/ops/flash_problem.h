// A flash attention problem for the op tests: its shape and options, random inputs, and the
// typed tensors the op takes.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "ejk/ops/flash_attention.h"

namespace ejk::test {

struct FlashCaseSpec {
  int64_t b = 1, sq = 512, sk = 512, hq = 8, hkv = 8, d = 128;
  bool causal = false;
  std::optional<SlidingWindow> window;
  std::optional<float> softcap;
  std::optional<float> scale;
  bool sinks = false, segments = false, varlen = false, bias = false;
  bool shared_sinks = false;  // softmax_aux [1] shared by every head instead of [Hq, 1]
  bool normalize_output = true;
  DType dtype = DType::f32;
  uint64_t seed = 0;
};

// Host tensors. `*_values` hold the float32 values (exactly the typed tensor's values, so a
// --save folder reproduces the inputs bit for bit); the typed ones feed the op.
struct FlashCase {
  FlashCaseSpec spec;
  Tensor q, k, v, bias, q_segment_ids, kv_segment_ids, cum_seqlens_q, cum_seqlens_k, softmax_aux;
  Tensor q_values, k_values, v_values, bias_values;

  FlashAttentionInputs inputs() const;
  // The same inputs copied to `device` (the host tensors themselves for the CPU); the copies
  // own the memory the views point to and are appended to `keep`, which must outlive them.
  FlashAttentionInputs inputs_on(Device device, std::vector<Tensor>& keep) const;
  FlashAttentionOptions options(int64_t block_q = 0, int64_t block_k = 0) const;
  // Visible (query, key) pairs under the position mask, for FLOP counts.
  double visible_pairs() const;
};

FlashCase make_random_case(const FlashCaseSpec& spec);

// Float32 copy of a typed floating tensor (values exact).
Tensor to_f32(const Tensor& t);

}  // namespace ejk::test
