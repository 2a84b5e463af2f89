#include "ops/merge_attention_states/merge_op.h"

#include <algorithm>
#include <new>

#include "ejk/core/error.h"

namespace ejk::ops {

MergeAttentionStatesOp::MergeAttentionStatesOp()
    : OpDef("merge_states"),
      out_a(tensor("out_a")), lse_a(tensor("lse_a")), out_b(tensor("out_b")), lse_b(tensor("lse_b")),
      out(tensor("out")), lse(tensor("lse")), sym_T(symbol("T")), sym_H(symbol("H")), sym_D(symbol("D")) {}

MergeStatesParams MergeAttentionStatesOp::params(const engine::Bound& b) const {
  MergeStatesParams p{};
  p.out_a = b.data(out_a), p.out_b = b.data(out_b), p.out = b.data(out);
  p.lse_a = static_cast<const float*>(b.data(lse_a)), p.lse_b = static_cast<const float*>(b.data(lse_b));
  p.lse = static_cast<float*>(b.data(lse));
  p.tokens = b.size(sym_T), p.heads = b.size(sym_H), p.head_dim = b.size(sym_D);
  // Tensor k of the three outs [..., T, H, D] and of the three LSEs [..., H, T].
  const TensorView* outs[3] = {&b.tensor(out_a), &b.tensor(out_b), &b.tensor(out)};
  const TensorView* lses[3] = {&b.tensor(lse_a), &b.tensor(lse_b), &b.tensor(lse)};
  for (int k = 0; k < 3; ++k) {
    p.out_stride_t[k] = outs[k]->strides[outs[k]->rank() - 3];
    p.out_stride_h[k] = outs[k]->strides[outs[k]->rank() - 2];
    p.lse_stride_h[k] = lses[k]->strides[lses[k]->rank() - 2];
  }
  // Leading dims, outermost first: size-1 dims dropped, and a dim folded into the one before it
  // where that one's stride is its stride times its size in all six tensors.
  int64_t lead_count = 1;
  for (int64_t i = 0; i < b.lead.size(); ++i) {
    const int64_t n = b.lead[i];
    lead_count *= n;
    if (n == 1) continue;
    bool fold = p.lead_rank > 0;
    for (int k = 0; k < 3 && fold; ++k)
      fold = p.out_lead_stride[k][p.lead_rank - 1] == outs[k]->strides[i] * n &&
             p.lse_lead_stride[k][p.lead_rank - 1] == lses[k]->strides[i] * n;
    const int d = fold ? p.lead_rank - 1 : p.lead_rank++;
    p.lead_size[d] = fold ? p.lead_size[d] * n : n;
    for (int k = 0; k < 3; ++k) p.out_lead_stride[k][d] = outs[k]->strides[i], p.lse_lead_stride[k][d] = lses[k]->strides[i];
  }
  p.rows = lead_count * p.heads * p.tokens;  // lse's element count, which the binder bounded
  return p;
}

engine::CpuWork MergeAttentionStatesOp::cpu_prepare(const engine::Bound& b, const engine::PlanData&,
                                                    void* params) const {
  static_assert(sizeof(MergeStatesParams) <= kParamBytes);
  auto* p = new (params) MergeStatesParams(this->params(b));
  // About 64 KiB of traffic per task: thread hand-offs stay rare, and a problem of a few MiB
  // still spreads over every thread.
  const int64_t row_bytes = 3 * p->head_dim * int64_t(dtype_size(b.dtype)) + 3 * int64_t(sizeof(float));
  p->rows_per_task = std::max<int64_t>(1, (int64_t{64} << 10) / row_bytes);
  return {ceil_div<int64_t>(p->rows, p->rows_per_task)};
}

#if !EJK_HAVE_CUDA
void MergeAttentionStatesOp::cuda_launch(const engine::Bound&, const engine::PlanData&,
                                         engine::CudaLaunchContext&) const {
  throw BackendUnavailable("merge_attention_states: this build has no CUDA backend (configured with EJK_ENABLE_CUDA=OFF)");
}
#endif

const MergeAttentionStatesOp& merge_attention_states_op() {
  static const MergeAttentionStatesOp op;
  return op;
}

}  // namespace ejk::ops
