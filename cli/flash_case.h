// A flash attention problem for the CLI: its shape and options, random inputs (or inputs
// loaded from a --save folder), and the typed tensors the op takes.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "ejk/flash_attention.h"

namespace ejk::cli {

struct FlashCaseSpec {
  int64_t b = 1, sq = 512, sk = 512, hq = 8, hkv = 8, d = 128;
  bool causal = false;
  std::optional<SlidingWindow> window;
  std::optional<float> softcap;
  std::optional<float> scale;
  bool sinks = false, segments = false, varlen = false, bias = false;
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
  FlashAttentionOptions options(Backend backend, int64_t block_q, int64_t block_k) const;
  // Visible (query, key) pairs under the position mask, for FLOP counts.
  double visible_pairs() const;
};

FlashCase make_random_case(const FlashCaseSpec& spec);

// Writes q.npy k.npy ... params.json (the arguments that are present).
void save_case(const FlashCase& c, const Tensor& out, const Tensor& lse, const std::filesystem::path& dir);

// Reads a folder written by save_case (or by anyone following its naming).
FlashCase load_case(const std::filesystem::path& dir);

// Float32 copy of a typed floating tensor (values exact).
Tensor to_f32(const Tensor& t);

}  // namespace ejk::cli
