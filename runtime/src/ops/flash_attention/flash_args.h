// What flash attention's forward and backward share: both bind the forward's arguments under the
// same names (Op: FlashAttentionOp or FlashAttentionBackwardOp), so the rules across them and the
// longest sequence are written once.
#pragma once
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "ejk/core/error.h"
#include "ejk/kernels/common/flash_params.h"
#include "ejk/kernels/common/mask.h"
#include "engine/bind.h"
#include "engine/metadata.h"

namespace ejk::ops::flash_args {

inline bool given(const Scalar& s) { return !std::holds_alternative<std::monostate>(s); }

inline double as_double(const Scalar& s) {
  return std::holds_alternative<int64_t>(s) ? double(std::get<int64_t>(s)) : std::get<double>(s);
}

inline std::array<int64_t, 2> as_window(const Scalar& s) {
  if (std::holds_alternative<int64_t>(s)) return {std::get<int64_t>(s), std::get<int64_t>(s)};
  return std::get<std::array<int64_t, 2>>(s);
}

[[noreturn]] inline void bad(std::string_view op, std::string_view arg, const std::string& what) {
  throw InvalidArgument(fmt::format("{}: {}: {}", op, arg, what));
}

// Hq a multiple of Hkv, a positive head dim, a sink when softmax_aux is given, max_seqlen_* only
// with varlen and within the packed lengths, and cum_seqlens' values where they are on the host.
// Scale, soft cap, window and max_seqlen ranges are the spec's (the binder checks them).
template <class Op> void check(const Op& op, const engine::Bound& b) {
  const std::string_view name = op.name();
  const int64_t hq = b.size(op.sym_Hq), hkv = b.size(op.sym_Hkv);
  if (hkv <= 0 || hq % hkv != 0)
    bad(name, "k", fmt::format("number of kv heads ({}) must divide the number of q heads ({})", hkv, hq));
  if (b.size(op.sym_D) <= 0) bad(name, "q", fmt::format("head_dim must be positive, got {}", b.size(op.sym_D)));
  if (b.has(op.softmax_aux) && b.size(op.sym_S) < 1) bad(name, "softmax_aux", "needs at least one sink");
  const bool varlen = b.mode >= 0;
  for (bool keys : {false, true}) {
    const Scalar& m = b.scalar(keys ? op.max_seqlen_k : op.max_seqlen_q);
    if (!given(m)) continue;
    const char* arg = keys ? "max_seqlen_k" : "max_seqlen_q";
    if (!varlen) bad(name, arg, "only with cum_seqlens_q (varlen)");
    const int64_t total = b.size(keys ? op.sym_Tk : op.sym_Tq);
    if (std::get<int64_t>(m) > total)
      bad(name, arg, fmt::format("must be in [0, {}] (the packed length), got {}", total, std::get<int64_t>(m)));
  }
  if (const Scalar& d = b.scalar(op.dropout_prob); given(d) && float(as_double(d)) >= 1.0f)
    bad(name, "dropout_prob", fmt::format("must be < 1 (1 drops every weight), got {}{}", as_double(d),
                                          as_double(d) < 1 ? " (1 as an f32)" : ""));
  if (!varlen) return;
  if (b.size(op.sym_N) < 1) bad(name, "cum_seqlens_q", "needs at least 2 entries (one sequence)");
  for (bool keys : {false, true}) {
    const int t = keys ? op.cum_seqlens_k : op.cum_seqlens_q;
    if (b.tensor(t).device.kind != DeviceKind::cpu || b.args->shapes_only) continue;
    const int64_t longest = engine::check_offsets(name, keys ? "cum_seqlens_k" : "cum_seqlens_q", b.tensor(t),
                                                  b.size(keys ? op.sym_Tk : op.sym_Tq));
    const Scalar& m = b.scalar(keys ? op.max_seqlen_k : op.max_seqlen_q);
    if (given(m) && std::get<int64_t>(m) < longest)
      bad(name, keys ? "max_seqlen_k" : "max_seqlen_q",
          fmt::format("is {}, but a sequence has {} rows", std::get<int64_t>(m), longest));
  }
}

// Whether the call drops weights: dropout_prob given and nonzero (the binder's rule for the flag).
template <class Op> bool dropout_on(const Op& op, const engine::Bound& b) {
  const Scalar& d = b.scalar(op.dropout_prob);
  return given(d) && as_double(d) != 0;
}

// The dropout's kernel arguments (common/philox.h): the threshold floor(p * 2^32) of the f32 p and
// the scale f32(1 / (1 - p)); the seed's i64 bits as the u64 key.
template <class Op> DropoutParams dropout_params(const Op& op, const engine::Bound& b) {
  DropoutParams d{};
  const Scalar& prob = b.scalar(op.dropout_prob);
  const double p = given(prob) ? double(float(as_double(prob))) : 0.0;
  d.threshold = uint32_t(std::floor(p * 4294967296.0));
  d.scale = float(1.0 / (1.0 - p));
  const Scalar& seed = b.scalar(op.dropout_seed);
  d.seed = given(seed) ? uint64_t(std::get<int64_t>(seed)) : 0;
  return d;
}

// The longest query / key sequence: max_seqlen_*, else read from cum_seqlens on the host, else
// the packed total (an upper bound; device metadata is never read back).
template <class Op> int64_t longest(const Op& op, const engine::Bound& b, bool keys) {
  if (b.mode < 0) return b.size(keys ? op.sym_Sk : op.sym_Sq);
  if (const Scalar& m = b.scalar(keys ? op.max_seqlen_k : op.max_seqlen_q); given(m)) return std::get<int64_t>(m);
  const TensorView& cu = b.tensor(keys ? op.cum_seqlens_k : op.cum_seqlens_q);
  if (cu.device.kind == DeviceKind::cpu && cu.data != nullptr) {
    const auto* c = static_cast<const int32_t*>(cu.data);
    int64_t m = 0;
    for (int64_t i = 1; i < cu.shape[0]; ++i) m = std::max<int64_t>(m, c[i] - c[i - 1]);
    return m;
  }
  return b.size(keys ? op.sym_Tk : op.sym_Tq);
}

// The forward's params from its arguments, as both ops bind them (the backward adds its own).
template <class Op> FlashFwdParams forward_params(const Op& op, const engine::Bound& b) {
  FlashFwdParams p{};
  const bool varlen = b.mode >= 0;
  p.q = b.data(op.q), p.k = b.data(op.k), p.v = b.data(op.v), p.out = b.data(op.out);
  p.lse = static_cast<float*>(b.data(op.lse));
  // Layout positions 0..3: batch (absent for packed rank-3 tensors: stride 0), seq, head, dim.
  p.q_stride_b = b.stride(op.q, 0), p.q_stride_s = b.stride(op.q, 1), p.q_stride_h = b.stride(op.q, 2);
  p.k_stride_b = b.stride(op.k, 0), p.k_stride_s = b.stride(op.k, 1), p.k_stride_h = b.stride(op.k, 2);
  p.v_stride_b = b.stride(op.v, 0), p.v_stride_s = b.stride(op.v, 1), p.v_stride_h = b.stride(op.v, 2);
  if (b.has(op.out)) p.o_stride_b = b.stride(op.out, 0), p.o_stride_s = b.stride(op.out, 1), p.o_stride_h = b.stride(op.out, 2);
  if (b.has(op.lse)) p.lse_stride_b = varlen ? 0 : b.stride(op.lse, 0), p.lse_stride_h = b.stride(op.lse, 1);
  p.heads_q = b.size(op.sym_Hq), p.heads_kv = b.size(op.sym_Hkv), p.head_dim = b.size(op.sym_D);
  p.batch = varlen ? b.size(op.sym_N) : b.size(op.sym_B);
  p.seqlen_q = longest(op, b, false), p.seqlen_k = longest(op, b, true);
  if (varlen) {
    p.cu_seqlens_q = static_cast<const i32*>(b.data(op.cum_seqlens_q));
    p.cu_seqlens_k = static_cast<const i32*>(b.data(op.cum_seqlens_k));
    p.total_q = b.size(op.sym_Tq), p.total_k = b.size(op.sym_Tk);  // the CUDA kernels' TMA bounds
  }
  if (b.has(op.q_segment_ids)) {
    p.q_segment_ids = static_cast<const i32*>(b.data(op.q_segment_ids));
    p.kv_segment_ids = static_cast<const i32*>(b.data(op.kv_segment_ids));
    p.q_seg_stride_b = b.stride(op.q_segment_ids, 0), p.kv_seg_stride_b = b.stride(op.kv_segment_ids, 0);
  }
  if (b.has(op.bias)) {
    const TensorView& t = b.tensor(op.bias);
    p.bias = t.data;
    p.bias_stride_b = t.shape[0] == 1 ? 0 : t.strides[0];  // size-1 dims broadcast
    p.bias_stride_h = t.shape[1] == 1 ? 0 : t.strides[1];
    p.bias_stride_q = t.strides[2];
  }
  if (b.has(op.attention_mask)) {
    const TensorView& t = b.tensor(op.attention_mask);
    p.dense_mask = static_cast<const u8*>(t.data);
    p.mask_stride_b = t.shape[0] == 1 ? 0 : t.strides[0];  // size-1 dims broadcast
    p.mask_stride_h = t.shape[1] == 1 ? 0 : t.strides[1];
    p.mask_stride_q = t.strides[2];
  }
  if (b.has(op.softmax_aux)) {
    p.softmax_aux = static_cast<const float*>(b.data(op.softmax_aux));
    p.num_sinks = b.size(op.sym_S);
    p.sinks_stride_h = b.stride(op.softmax_aux, 0);  // [S]: absent head dim, shared by all heads
  }
  const Scalar& scale = b.scalar(op.softmax_scale);
  p.scale = given(scale) ? float(as_double(scale)) : 1.0f / std::sqrt(float(p.head_dim));
  p.mask.causal = given(b.scalar(op.causal)) && std::get<bool>(b.scalar(op.causal));
  p.mask.window_left = p.mask.window_right = kUnbounded;
  if (const Scalar& w = b.scalar(op.sliding_window); given(w)) {
    // A bound past every row of q and k means no limit on that side; clamped to the rows, so the
    // kernels' q - left and q + right cannot overflow for any accepted value.
    const int64_t rows = std::max(varlen ? p.total_q : b.size(op.sym_Sq), varlen ? p.total_k : b.size(op.sym_Sk));
    const auto lr = as_window(w);
    p.mask.window_left = std::min(lr[0], rows), p.mask.window_right = std::min(lr[1], rows);
  }
  if (const Scalar& c = b.scalar(op.logits_soft_cap); given(c)) p.softcap = float(as_double(c));
  const Scalar& norm = b.scalar(op.normalize_output);
  p.normalize_output = !given(norm) || std::get<bool>(norm) ? 1 : 0;
  return p;
}

// Visible (query, key) pairs over every sequence of one head: the mask's bounds, clamped to the
// sequences (the FLOP count of both ops). Packed sequences are read on the host.
template <class Op> double visible_pairs(const Op& op, const engine::Bound& b, const FlashFwdParams& p) {
  auto pairs = [&](int64_t sq, int64_t sk) {
    double n = 0;
    for (int64_t i = 0; i < sq; ++i) {
      const int64_t lo = std::max<int64_t>(0, first_visible_key(i, p.mask));
      const int64_t hi = std::min<int64_t>(sk - 1, last_visible_key(i, p.mask));
      if (hi >= lo) n += double(hi - lo + 1);
    }
    return n;
  };
  if (!p.cu_seqlens_q) return double(p.batch) * pairs(p.seqlen_q, p.seqlen_k);
  for (int t : {op.cum_seqlens_q, op.cum_seqlens_k})
    if (b.tensor(t).device.kind != DeviceKind::cpu)
      bad(op.name(), op.schema().tensors()[size_t(t)].name,
          "counting FLOPs reads it on the host, got a tensor on " + to_string(b.tensor(t).device));
  double visible = 0;
  for (int64_t s = 0; s < p.batch; ++s)
    visible += pairs(p.cu_seqlens_q[s + 1] - p.cu_seqlens_q[s], p.cu_seqlens_k[s + 1] - p.cu_seqlens_k[s]);
  return visible;
}

}  // namespace ejk::ops::flash_args
