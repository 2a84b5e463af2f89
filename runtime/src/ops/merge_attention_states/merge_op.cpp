#include "ops/merge_attention_states/merge_op.h"

#include <algorithm>
#include <new>

#include "ejk/core/error.h"
#include "engine/elements.h"

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
  // Leading dims folded as all six tensors' strides allow (outs k at 0..2, LSEs k at 3..5).
  const TensorView* all[6] = {outs[0], outs[1], outs[2], lses[0], lses[1], lses[2]};
  const engine::FoldedLead f = engine::fold_lead_dims(b.lead, all, 6);
  static_assert(Dims::kMaxRank - 3 <= kMergeMaxLead, "out's rank bounds its leading dims");
  p.lead_rank = f.rank;
  for (int d = 0; d < f.rank; ++d) {
    p.lead_size[d] = f.size[d];
    for (int k = 0; k < 3; ++k) p.out_lead_stride[k][d] = f.stride[k][d], p.lse_lead_stride[k][d] = f.stride[3 + k][d];
  }
  const int64_t lead_count = f.count;
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

const MergeAttentionStatesOp& merge_attention_states_op() {
  static const MergeAttentionStatesOp op;
  return op;
}

EJK_REGISTER_OP(merge_attention_states_op);

}  // namespace ejk::ops
