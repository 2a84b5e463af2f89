// unified_attention through the engine: the ragged paged attention family over token-major K
// and V caches described by strides, every sequence of the tables, ALiBi and the query-query
// bias; the checks its spec cannot state, CPU tasks and the float64 reference.
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

class UnifiedAttentionOp final : public RaggedPageFamilyOp {
 public:
  UnifiedAttentionOp()
      : RaggedPageFamilyOp("unified_page", "logits_soft_cap"), queries(tensor("queries")),
        key_cache(tensor("key_cache")),
        value_cache(tensor("value_cache")), kv_lens(tensor("kv_lens")), block_tables(tensor("block_tables")),
        query_start_loc(tensor("query_start_loc")), alibi_slopes(tensor("alibi_slopes")), qq_bias(tensor("qq_bias")),
        softmax_aux(tensor("softmax_aux")), out(tensor("out")), sym_T(symbol("T")),
        sym_Hq(symbol("Hq")), sym_D(symbol("D")), sym_NB(symbol("NB")), sym_BS(symbol("BS")), sym_Hkv(symbol("Hkv")),
        sym_S(symbol("S")), sym_MB(symbol("MB")), causal(scalar("causal")) {}

  void check(const engine::Bound& b) const override {
    const int64_t Hq = b.size(sym_Hq), Hkv = b.size(sym_Hkv), D = b.size(sym_D), BS = b.size(sym_BS);
    const int64_t MB = b.size(sym_MB), S = b.size(sym_S), NB = b.size(sym_NB);
    if (Hkv < 1 || Hq % Hkv != 0)
      throw InvalidArgument(fmt::format("{}: queries: dim 1 (Hq = {}) must be a positive multiple of key_cache's dim 2 "
                                        "(Hkv = {})", name(), Hq, Hkv));
    if (D < 1) throw InvalidArgument(fmt::format("{}: queries: dim 2 (D) must be at least 1, got 0", name()));
    if (BS < 1) throw InvalidArgument(fmt::format("{}: key_cache: dim 1 (block_size) must be at least 1, got 0", name()));
    if (MB * BS > INT32_MAX)
      throw InvalidArgument(fmt::format("{}: block_tables: {} blocks of {} positions exceed the i32 kv_lens", name(),
                                        MB, BS));
    if (S > 0 && MB > 0 && NB < 1)
      throw InvalidArgument(fmt::format("{}: key_cache: dim 0 (num_blocks) must be at least 1 for a block table", name()));
    if (b.args->shapes_only) return;
    RaggedSizes z{S, b.size(sym_T), NB, BS, MB, b.given(sliding_window) ? b.i64(sliding_window) : 0};
    z.lens_arg = "kv_lens";
    check_ragged_metadata(name(), z, b.tensor(query_start_loc), b.tensor(kv_lens), b.tensor(block_tables));
  }

  RaggedPageParams params(const engine::Bound& b) const override {
    RaggedPageParams p{};
    p.q = b.data(queries), p.k = b.data(key_cache), p.v = b.data(value_cache), p.out = b.data(out);
    p.context_lens = static_cast<const i32*>(b.data(kv_lens));
    p.block_tables = static_cast<const i32*>(b.data(block_tables));
    p.query_start = static_cast<const i32*>(b.data(query_start_loc));
    p.num_seqs = nullptr;  // every sequence of the tables
    p.sinks = b.has(softmax_aux) ? static_cast<const float*>(b.data(softmax_aux)) : nullptr;
    p.alibi = b.has(alibi_slopes) ? static_cast<const float*>(b.data(alibi_slopes)) : nullptr;
    p.qq_bias = b.has(qq_bias) ? static_cast<const float*>(b.data(qq_bias)) : nullptr;
    p.qq_n = b.has(qq_bias) ? b.tensor(qq_bias).shape[0] : 0;
    p.tokens = b.size(sym_T), p.seqs = b.size(sym_S), p.q_heads = b.size(sym_Hq), p.kv_heads = b.size(sym_Hkv);
    p.head_dim = b.size(sym_D), p.num_pages = b.size(sym_NB), p.page_size = b.size(sym_BS), p.max_pages = b.size(sym_MB);
    p.q_st = b.stride(queries, 0), p.q_sh = b.stride(queries, 1);
    if (b.has(out)) p.o_st = b.stride(out, 0), p.o_sh = b.stride(out, 1);
    p.k_sp = b.stride(key_cache, 0), p.k_ss = b.stride(key_cache, 1), p.k_sh = b.stride(key_cache, 2);
    p.v_sp = b.stride(value_cache, 0), p.v_ss = b.stride(value_cache, 1), p.v_sh = b.stride(value_cache, 2);
    p.bt_ss = b.stride(block_tables, 0);
    set_logits(p, b);
    p.non_causal = b.flag(causal) ? 0 : 1;
    return p;
  }

  double flops(const engine::Bound& b) const override { return capacity_flops(params(b)); }

  void reference(const engine::Bound& b, double* const* outputs) const override {
    ragged_page_reference(params(b), b.tensor(queries), b.tensor(key_cache), b.tensor(value_cache), 0, outputs[out], nullptr);
  }

  const int queries, key_cache, value_cache, kv_lens, block_tables, query_start_loc, alibi_slopes, qq_bias,
      softmax_aux, out;
  const int sym_T, sym_Hq, sym_D, sym_NB, sym_BS, sym_Hkv, sym_S, sym_MB, causal;
};

}  // namespace

const engine::OpDef& unified_attention_op() {
  static const UnifiedAttentionOp op;
  return op;
}

EJK_REGISTER_OP(unified_attention_op);

}  // namespace ejk::ops
