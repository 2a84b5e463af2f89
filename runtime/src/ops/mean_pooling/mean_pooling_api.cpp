// The typed C++ API of mean_pooling and mean_pooling_backward over the engine.
#include "ejk/ops/mean_pooling.h"

#include "engine/bind.h"
#include "engine/call.h"
#include "ops/mean_pooling/mean_pooling_op.h"

namespace ejk {
namespace {

using ops::MeanPoolingOp;

engine::ArgPack pack(const MeanPoolingOp& op, const TensorView& in, const std::optional<TensorView>& cu_seqlens) {
  engine::ArgPack a;
  a.tensors[op.input] = &in;
  a.tensors[op.cu_seqlens] = cu_seqlens ? &*cu_seqlens : nullptr;
  return a;
}

// The output sized from the checked arguments, on their device, then the call.
Tensor run_allocating(const MeanPoolingOp& op, engine::ArgPack a, const Context& ctx) {
  a.outputs_optional = true;
  const engine::Bound b = engine::bind(op, a);
  op.check(b);
  Tensor out = Tensor::empty(engine::output_shape(b, op.output), b.dtype, b.device);
  a.outputs_optional = false;
  a.tensors[op.output] = &out.view();
  engine::call(op, a, ctx);
  return out;
}

RunInfo run_into(const MeanPoolingOp& op, engine::ArgPack a, const TensorView& out, const Context& ctx) {
  a.tensors[op.output] = &out;
  return engine::call(op, a, ctx);
}

}  // namespace

Tensor mean_pooling(const TensorView& x, const std::optional<TensorView>& cu_seqlens, const Context& ctx) {
  return run_allocating(ops::mean_pooling_op(), pack(ops::mean_pooling_op(), x, cu_seqlens), ctx);
}

RunInfo mean_pooling_into(const TensorView& x, const std::optional<TensorView>& cu_seqlens, const TensorView& out,
                          const Context& ctx) {
  return run_into(ops::mean_pooling_op(), pack(ops::mean_pooling_op(), x, cu_seqlens), out, ctx);
}

Tensor mean_pooling_backward(const TensorView& g, int64_t num_tokens, const std::optional<TensorView>& cu_seqlens,
                             const Context& ctx) {
  const MeanPoolingOp& op = ops::mean_pooling_backward_op();
  engine::ArgPack a = pack(op, g, cu_seqlens);
  a.scalars[op.num_tokens] = num_tokens;
  return run_allocating(op, a, ctx);
}

RunInfo mean_pooling_backward_into(const TensorView& g, const std::optional<TensorView>& cu_seqlens,
                                   const TensorView& dx, const Context& ctx) {
  return run_into(ops::mean_pooling_backward_op(), pack(ops::mean_pooling_backward_op(), g, cu_seqlens), dx, ctx);
}

}  // namespace ejk
