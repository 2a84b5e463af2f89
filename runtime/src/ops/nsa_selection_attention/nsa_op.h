// nsa_selection_attention and nsa_selection_attention_backward through the engine. One OpDef
// class serves both (the backward binds the forward's arguments under the same names): the
// checks the specs cannot state, NsaParams from the bound call, the CPU tasks, the CUDA launches
// (nsa_cuda.cpp) and the float64 reference (nsa_reference.h).
#pragma once
#include <string_view>

#include "ejk/kernels/common/nsa_params.h"
#include "engine/op_def.h"

namespace ejk::ops {

class NsaSelectionOp final : public engine::OpDef {
 public:
  NsaSelectionOp(std::string_view kernel_op, bool backward);

  void check(const engine::Bound& b) const override;
  engine::CpuWork cpu_prepare(const engine::Bound& b, const engine::PlanData& plan, void* params) const override;
#if EJK_HAVE_CUDA
  // nsa_cuda.cpp: the forward's launch, the backward's two (dq with the delta rows, then dk/dv)
  // and its workspace (the delta rows).
  void cuda_launch(const engine::Bound& b, const engine::PlanData& plan, engine::CudaLaunchContext& lc) const override;
  Workspace cuda_workspace(const engine::Bound& b, const engine::PlanData& plan) const override;
  int64_t cuda_dynamic_smem(const VariantKey& key) const override;
#endif
  void reference(const engine::Bound& b, double* const* out) const override;
  double flops(const engine::Bound& b) const override;

  // Every field the bound call gives (the backward's only in the backward).
  NsaParams params(const engine::Bound& b) const;

  const bool backward;
  const int q, k, v, block_indices, block_counts, out, lse;
  const int d_out, d_lse, dq, dk, dv;  // -1 in the forward
  const int softmax_scale, block_size;
  const int sym_B, sym_T, sym_Hq, sym_Hkv, sym_D, sym_S;
};

const NsaSelectionOp& nsa_selection_attention_op();
const NsaSelectionOp& nsa_selection_attention_backward_op();

}  // namespace ejk::ops
