// ejk::flash_attention: the flash attention forward op.
//
// q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D] (Hq a multiple of Hkv: GQA/MQA), or packed varlen
// sequences q [total_q, Hq, D] / [1, total_q, Hq, D] with cum_seqlens_q/k. Semantics of every
// option are those of kernels/ejk/kernels/common/mask.h. Returns out [B, Sq, Hq, D] in q's dtype
// and lse [B, Hq, Sq] in float32.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>
#include <optional>
#include <string>

#include "ejk/tensor.h"

namespace ejk {

enum class Backend : uint8_t { auto_, cpu, cuda, hip };
std::string_view backend_name(Backend b);
Backend parse_backend(std::string_view s);
// Whether a backend can run here; `why` says why not (no driver, no device, not built).
bool backend_available(Backend b, std::string* why = nullptr);

struct SlidingWindow {
  int64_t left = 0, right = 0;
  static SlidingWindow symmetric(int64_t w) { return {w, w}; }
};

struct FlashAttentionOptions {
  std::optional<float> softmax_scale;           // default 1/sqrt(D)
  bool causal = false;
  std::optional<SlidingWindow> sliding_window;  // keys in [q - left, q + right]
  std::optional<float> logits_soft_cap;         // cap * tanh(s / cap); cap > 0
  bool normalize_output = true;
  Backend backend = Backend::auto_;
  // Block sizes; 0 = the spec's heuristic.
  int64_t block_q = 0, block_k = 0;
};

struct FlashAttentionInputs {
  TensorView q, k, v;
  std::optional<TensorView> bias;            // [B|1, Hq|1, Sq, Sk], q's dtype
  std::optional<TensorView> q_segment_ids;   // [B, Sq] i32, -1 = padding
  std::optional<TensorView> kv_segment_ids;  // [B, Sk] i32
  std::optional<TensorView> cum_seqlens_q;   // [N + 1] i32, non-decreasing, from 0
  std::optional<TensorView> cum_seqlens_k;   // [N + 1] i32
  std::optional<TensorView> softmax_aux;     // sinks: [Hq] or [Hq, num_sinks], float
};

// Where the variant came from, for logs, the CLI's --json and tests.
enum class VariantSource : uint8_t { aot, cache, jit };
std::string_view source_name(VariantSource s);

struct RunInfo {
  std::string key;           // canonical variant key
  Backend backend = Backend::cpu;
  VariantSource source = VariantSource::aot;
  double compile_ms = 0;     // JIT compile (0 unless source == jit)
  double load_ms = 0;        // cache load or module load
  std::string fallback_reason;  // why auto did not pick a GPU backend, if it did not
};

struct FlashAttentionResult {
  Tensor out;  // [B, Sq, Hq, D] (varlen: q's shape)
  Tensor lse;  // [B, Hq, Sq] f32 (varlen: [1, Hq, total_q])
  RunInfo info;
};

// Allocates the outputs.
FlashAttentionResult flash_attention(const FlashAttentionInputs& in,
                                     const FlashAttentionOptions& opt = {});

// Writes into caller-provided outputs (shapes/dtypes as above, validated).
RunInfo flash_attention_into(const FlashAttentionInputs& in, const FlashAttentionOptions& opt,
                             const TensorView& out, const TensorView& lse);

// The float64 reference: same validation, same mask definitions (mask.h) as the kernels,
// plain two-pass softmax in double. out in q's layout (contiguous), lse [B, Hq, Sq].
struct FlashAttentionReference {
  std::vector<double> out, lse;
};
FlashAttentionReference flash_attention_reference(const FlashAttentionInputs& in,
                                                  const FlashAttentionOptions& opt = {});

// Called with (key, true) before a variant is compiled and (key, false) after, from the
// compiling thread; the CLI shows progress with it. Pass an empty function to remove.
using CompileObserver = std::function<void(std::string_view key, bool started)>;
void set_compile_observer(CompileObserver observer);

}  // namespace ejk
