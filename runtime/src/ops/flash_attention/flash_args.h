// What flash attention's forward and backward share: both bind the forward's arguments under the
// same names (Op: FlashAttentionOp or FlashAttentionBackwardOp), so the rules across them and the
// longest sequence are written once.
#pragma once
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "ejk/core/error.h"
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

}  // namespace ejk::ops::flash_args
