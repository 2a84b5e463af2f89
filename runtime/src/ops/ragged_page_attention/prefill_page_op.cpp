// prefill_page_attention through the engine: one sequence of the ragged paged attention family,
// its heads-first K and V caches described by strides (no query starts: the chunk is every
// token), the checks its spec cannot state, CPU tasks and the float64 reference.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <new>

#include "ejk/core/error.h"
#include "engine/call.h"
#include "ops/ragged_page_attention/ragged_page_op.h"
#include "registry.h"

namespace ejk::ops {
namespace {

class PrefillPageAttentionOp final : public RaggedPageFamilyOp {
 public:
  PrefillPageAttentionOp()
      : RaggedPageFamilyOp("prefill_page", "attn_logits_soft_cap"), query(tensor("query")),
        key_cache(tensor("key_cache")), value_cache(tensor("value_cache")), context_len(tensor("context_len")),
        page_indices(tensor("page_indices")), out(tensor("out")), sym_C(symbol("C")), sym_Hq(symbol("Hq")), sym_D(symbol("D")),
        sym_Hkv(symbol("Hkv")), sym_P(symbol("P")), sym_PS(symbol("PS")), sym_MB(symbol("MB")) {}

  void check(const engine::Bound& b) const override {
    const int64_t Hq = b.size(sym_Hq), Hkv = b.size(sym_Hkv), D = b.size(sym_D), P = b.size(sym_P);
    const int64_t PS = b.size(sym_PS), MB = b.size(sym_MB);
    if (Hkv < 1 || Hq % Hkv != 0)
      throw InvalidArgument(fmt::format("{}: query: dim 1 (Hq = {}) must be a positive multiple of key_cache's dim 0 "
                                        "(Hkv = {})", name(), Hq, Hkv));
    if (D < 1) throw InvalidArgument(fmt::format("{}: query: dim 2 (D) must be at least 1, got 0", name()));
    if (PS < 1) throw InvalidArgument(fmt::format("{}: key_cache: dim 2 (page_size) must be at least 1, got 0", name()));
    if (MB * PS > INT32_MAX)
      throw InvalidArgument(fmt::format("{}: page_indices: {} pages of {} positions exceed the i32 context_len",
                                        name(), MB, PS));
    const TensorView &len_t = b.tensor(context_len), &pages = b.tensor(page_indices);
    if (b.args->shapes_only || len_t.device.kind != DeviceKind::cpu) return;
    const int64_t n = static_cast<const int32_t*>(len_t.data)[0], C = b.size(sym_C);
    if (n < 0 || n > MB * PS)
      throw InvalidArgument(fmt::format("{}: context_len: must be in [0, {}] (page_indices' {} pages of {}), got {}",
                                        name(), MB * PS, MB, PS, n));
    if (pages.device.kind != DeviceKind::cpu || C == 0) return;
    // Only the pages a query reaches: the window's oldest is the first query's.
    const int64_t first = b.given(sliding_window) ? std::max<int64_t>(0, n - C - b.i64(sliding_window) + 1) : 0;
    const auto* idx = static_cast<const int32_t*>(pages.data);
    for (int64_t j = first / PS; j < (n + PS - 1) / PS; ++j) {
      const int64_t page = idx[j * pages.strides[0]];
      if (page < 0 || page >= P)
        throw InvalidArgument(fmt::format("{}: page_indices[{}]: must be a page in [0, {}), got {}", name(), j, P,
                                          page));
    }
  }

  RaggedPageParams params(const engine::Bound& b) const override {
    RaggedPageParams p{};
    p.q = b.data(query), p.k = b.data(key_cache), p.v = b.data(value_cache), p.out = b.data(out);
    p.context_lens = static_cast<const i32*>(b.data(context_len));
    p.block_tables = static_cast<const i32*>(b.data(page_indices));
    p.query_start = nullptr, p.num_seqs = nullptr, p.sinks = nullptr;  // one sequence: the whole chunk
    p.tokens = b.size(sym_C), p.seqs = 1, p.q_heads = b.size(sym_Hq), p.kv_heads = b.size(sym_Hkv);
    p.head_dim = b.size(sym_D), p.num_pages = b.size(sym_P), p.page_size = b.size(sym_PS), p.max_pages = b.size(sym_MB);
    p.q_st = b.stride(query, 0), p.q_sh = b.stride(query, 1);
    if (b.has(out)) p.o_st = b.stride(out, 0), p.o_sh = b.stride(out, 1);
    p.k_sh = b.stride(key_cache, 0), p.k_sp = b.stride(key_cache, 1), p.k_ss = b.stride(key_cache, 2);
    p.v_sh = b.stride(value_cache, 0), p.v_sp = b.stride(value_cache, 1), p.v_ss = b.stride(value_cache, 2);
    p.bt_ss = 0;  // page_indices is the sequence's one table row
    set_logits(p, b);
    return p;
  }

  double flops(const engine::Bound& b) const override { return capacity_flops(params(b)); }

  void reference(const engine::Bound& b, double* const* outputs) const override {
    ragged_page_reference(params(b), b.tensor(query), b.tensor(key_cache), b.tensor(value_cache), 0, outputs[out],
                          nullptr);
  }

  const int query, key_cache, value_cache, context_len, page_indices, out;
  const int sym_C, sym_Hq, sym_D, sym_Hkv, sym_P, sym_PS, sym_MB;
};

}  // namespace

const engine::OpDef& prefill_page_attention_op() {
  static const PrefillPageAttentionOp op;
  return op;
}

EJK_REGISTER_OP(prefill_page_attention_op);

}  // namespace ejk::ops
