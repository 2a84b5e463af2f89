// The typed C++ API of merge_attention_states: its tensors packed into the engine's arguments.
#include "ejk/ops/merge_attention_states.h"

#include "engine/bind.h"
#include "engine/call.h"
#include "ops/merge_attention_states/merge_op.h"

namespace ejk {
namespace {

using ops::merge_attention_states_op;

engine::ArgPack pack(const TensorView& out_a, const TensorView& lse_a, const TensorView& out_b, const TensorView& lse_b) {
  const ops::MergeAttentionStatesOp& op = merge_attention_states_op();
  engine::ArgPack a;
  a.tensors[op.out_a] = &out_a, a.tensors[op.lse_a] = &lse_a;
  a.tensors[op.out_b] = &out_b, a.tensors[op.lse_b] = &lse_b;
  return a;
}

}  // namespace

RunInfo merge_attention_states_into(const TensorView& out_a, const TensorView& lse_a, const TensorView& out_b,
                                    const TensorView& lse_b, const TensorView& out, const TensorView& lse,
                                    const Context& ctx) {
  engine::ArgPack a = pack(out_a, lse_a, out_b, lse_b);
  a.tensors[merge_attention_states_op().out] = &out;
  a.tensors[merge_attention_states_op().lse] = &lse;
  return engine::call(merge_attention_states_op(), a, ctx);
}

MergeAttentionStatesResult merge_attention_states(const TensorView& out_a, const TensorView& lse_a,
                                                  const TensorView& out_b, const TensorView& lse_b, const Context& ctx) {
  const ops::MergeAttentionStatesOp& op = merge_attention_states_op();
  engine::ArgPack a = pack(out_a, lse_a, out_b, lse_b);
  a.outputs_optional = true;
  const engine::Bound b = engine::bind(op, a);
  MergeAttentionStatesResult r;
  r.out = Tensor::empty(engine::output_shape(b, op.out), b.dtype, b.device);
  r.lse = Tensor::empty(engine::output_shape(b, op.lse), DType::f32, b.device);
  r.info = merge_attention_states_into(out_a, lse_a, out_b, lse_b, r.out.view(), r.lse.view(), ctx);
  return r;
}

}  // namespace ejk
