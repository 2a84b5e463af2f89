// decode_attention through the engine: the ragged paged attention family in its decode mode
// (one query per sequence, RaggedPageParams::decode) over a flat token-major buffer viewed as
// [N / page_size, page_size, Hkv, D] pages by strides, with the log-sum-exp output; the checks
// its spec cannot state and the float64 reference. CPU tasks and the CUDA launch are the
// family's (RaggedPageFamilyOp).
#include <fmt/format.h>

#include <cstdint>

#include "ejk/core/error.h"
#include "engine/call.h"
#include "ops/ragged_page_attention/ragged_page_op.h"
#include "registry.h"

namespace ejk::ops {
namespace {

class DecodeAttentionOp final : public RaggedPageFamilyOp {
 public:
  DecodeAttentionOp()
      : RaggedPageFamilyOp("decode_page", "logits_soft_cap", nullptr), query(tensor("query")),
        key_buffer(tensor("key_buffer")), value_buffer(tensor("value_buffer")),
        req_to_tokens(tensor("req_to_tokens")), seq_lens(tensor("seq_lens")), out(tensor("out")), lse(tensor("lse")),
        page_size(scalar("page_size")), sym_B(symbol("B")), sym_Hq(symbol("Hq")), sym_D(symbol("D")),
        sym_N(symbol("N")), sym_Hkv(symbol("Hkv")), sym_MP(symbol("MP")) {}

  void check(const engine::Bound& b) const override {
    const int64_t Hq = b.size(sym_Hq), Hkv = b.size(sym_Hkv), D = b.size(sym_D), N = b.size(sym_N);
    const int64_t B = b.size(sym_B), MP = b.size(sym_MP), PS = b.i64(page_size);
    if (Hkv < 1 || Hq % Hkv != 0)
      throw InvalidArgument(fmt::format("{}: query: dim 1 (Hq = {}) must be a positive multiple of key_buffer's dim 1 "
                                        "(Hkv = {})", name(), Hq, Hkv));
    if (D < 1) throw InvalidArgument(fmt::format("{}: query: dim 2 (D) must be at least 1, got 0", name()));
    if (N % PS != 0)
      throw InvalidArgument(fmt::format("{}: key_buffer: dim 0 (total_tokens = {}) must be a multiple of page_size = {}",
                                        name(), N, PS));
    if (MP * PS > INT32_MAX)
      throw InvalidArgument(fmt::format("{}: req_to_tokens: {} pages of {} positions exceed the i32 seq_lens", name(),
                                        MP, PS));
    if (B > 0 && MP > 0 && N < 1)
      throw InvalidArgument(fmt::format("{}: key_buffer: dim 0 (total_tokens) must be at least page_size = {} for a "
                                        "page table", name(), PS));
    if (b.args->shapes_only) return;
    RaggedSizes z{B, B, N / PS, PS, MP, 0};
    z.lens_arg = "seq_lens", z.tables_arg = "req_to_tokens", z.decode = true;
    check_ragged_metadata(name(), z, TensorView{}, b.tensor(seq_lens), b.tensor(req_to_tokens));
  }

  RaggedPageParams params(const engine::Bound& b) const override {
    RaggedPageParams p{};
    p.q = b.data(query), p.k = b.data(key_buffer), p.v = b.data(value_buffer), p.out = b.data(out);
    p.lse = static_cast<float*>(b.data(lse));
    p.context_lens = static_cast<const i32*>(b.data(seq_lens));
    p.block_tables = static_cast<const i32*>(b.data(req_to_tokens));
    p.decode = 1;
    const int64_t PS = b.i64(page_size);
    p.tokens = p.seqs = b.size(sym_B), p.q_heads = b.size(sym_Hq), p.kv_heads = b.size(sym_Hkv);
    p.head_dim = b.size(sym_D), p.num_pages = b.size(sym_N) / PS, p.page_size = PS, p.max_pages = b.size(sym_MP);
    p.q_st = b.stride(query, 0), p.q_sh = b.stride(query, 1);
    if (b.has(out)) p.o_st = b.stride(out, 0), p.o_sh = b.stride(out, 1);
    if (b.has(lse)) p.lse_st = b.stride(lse, 0), p.lse_sh = b.stride(lse, 1);
    // Page p's slot i is buffer row p * page_size + i: the page stride is page_size rows.
    p.k_ss = b.stride(key_buffer, 0), p.k_sp = PS * p.k_ss, p.k_sh = b.stride(key_buffer, 1);
    p.v_ss = b.stride(value_buffer, 0), p.v_sp = PS * p.v_ss, p.v_sh = b.stride(value_buffer, 1);
    p.bt_ss = b.stride(req_to_tokens, 0);
    set_logits(p, b);
    return p;
  }

  double flops(const engine::Bound& b) const override { return capacity_flops(params(b)); }

  void reference(const engine::Bound& b, double* const* outputs) const override {
    ragged_page_reference(params(b), b.tensor(query), b.tensor(key_buffer), b.tensor(value_buffer), 0, outputs[out],
                          outputs[lse]);
  }

  const int query, key_buffer, value_buffer, req_to_tokens, seq_lens, out, lse, page_size;
  const int sym_B, sym_Hq, sym_D, sym_N, sym_Hkv, sym_MP;
};

}  // namespace

const engine::OpDef& decode_attention_op() {
  static const DecodeAttentionOp op;
  return op;
}

EJK_REGISTER_OP(decode_attention_op);

}  // namespace ejk::ops
