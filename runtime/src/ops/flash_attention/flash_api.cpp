// The typed C++ API of flash_attention: its structs packed into the engine's arguments.
#include "ejk/ops/flash_attention.h"

#include "engine/bind.h"
#include "engine/call.h"
#include "ops/flash_attention/flash_op.h"

namespace ejk {
namespace {

using ops::FlashAttentionOp;
using ops::flash_attention_op;

engine::ArgPack pack(const FlashAttentionInputs& in, const FlashAttentionOptions& opt) {
  const FlashAttentionOp& op = flash_attention_op();
  engine::ArgPack a;
  a.tensors[op.q] = &in.q;
  a.tensors[op.k] = &in.k;
  a.tensors[op.v] = &in.v;
  auto optional = [&](int t, const std::optional<TensorView>& v) { a.tensors[t] = v ? &*v : nullptr; };
  optional(op.bias, in.bias);
  optional(op.q_segment_ids, in.q_segment_ids);
  optional(op.kv_segment_ids, in.kv_segment_ids);
  optional(op.cum_seqlens_q, in.cum_seqlens_q);
  optional(op.cum_seqlens_k, in.cum_seqlens_k);
  optional(op.softmax_aux, in.softmax_aux);
  if (opt.softmax_scale) a.scalars[op.softmax_scale] = double(*opt.softmax_scale);
  a.scalars[op.causal] = opt.causal;
  if (opt.sliding_window) a.scalars[op.sliding_window] = std::array<int64_t, 2>{opt.sliding_window->left, opt.sliding_window->right};
  if (opt.logits_soft_cap) a.scalars[op.logits_soft_cap] = double(*opt.logits_soft_cap);
  a.scalars[op.normalize_output] = opt.normalize_output;
  if (opt.max_seqlen_q) a.scalars[op.max_seqlen_q] = *opt.max_seqlen_q;
  if (opt.max_seqlen_k) a.scalars[op.max_seqlen_k] = *opt.max_seqlen_k;
  static const int block_q = op.axis("block_q"), block_k = op.axis("block_k");
  a.tuning[block_q] = opt.block_q;
  a.tuning[block_k] = opt.block_k;
  return a;
}

}  // namespace

RunInfo flash_attention_into(const FlashAttentionInputs& in, const FlashAttentionOptions& opt, const TensorView& out,
                             const TensorView& lse, const Context& ctx) {
  engine::ArgPack a = pack(in, opt);
  a.tensors[flash_attention_op().out] = &out;
  a.tensors[flash_attention_op().lse] = &lse;
  return engine::call(flash_attention_op(), a, ctx);
}

FlashAttentionResult flash_attention(const FlashAttentionInputs& in, const FlashAttentionOptions& opt,
                                     const Context& ctx) {
  const FlashAttentionOp& op = flash_attention_op();
  engine::ArgPack a = pack(in, opt);
  a.outputs_optional = true;
  const engine::Bound b = engine::bind(op, a);
  FlashAttentionResult r;
  r.out = Tensor::empty(engine::output_shape(b, op.out), b.dtype, b.device);
  r.lse = Tensor::empty(engine::output_shape(b, op.lse), DType::f32, b.device);
  r.info = flash_attention_into(in, opt, r.out.view(), r.lse.view(), ctx);
  return r;
}

FlashAttentionReference flash_attention_reference(const FlashAttentionInputs& in, const FlashAttentionOptions& opt) {
  Args args;  // through the generic reference, which sizes and checks the outputs
  const FlashAttentionOp& op = flash_attention_op();
  const engine::ArgPack a = pack(in, opt);
  for (size_t t = 0; t < op.schema().tensors().size(); ++t)
    if (a.tensors[t]) args.set(op.schema().tensors()[t].name, *a.tensors[t]);
  for (size_t s = 0; s < op.schema().scalars().size(); ++s) args.set(op.schema().scalars()[s].name, a.scalars[s]);
  FlashAttentionReference r;
  for (ReferenceOutput& o : reference("flash_attention", args)) (o.name == "out" ? r.out : r.lse) = std::move(o.values);
  return r;
}

}  // namespace ejk
