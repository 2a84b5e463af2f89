// blocksparse_attention and blocksparse_attention_backward through the engine. One OpDef class
// serves both (they bind the forward's arguments under the same names): the checks the specs
// cannot state, the block lists planned on the host once per call for the CPU kernels
// (bsa_lists.h), the CPU tasks, the CUDA forward's launch (bsa_cuda.cpp) and the float64
// reference (bsa_reference.h).
#pragma once
#include <string_view>

#include "ejk/kernels/common/blocksparse_params.h"
#include "engine/op_def.h"

namespace ejk::ops {

// Tile sizes of a plan's key, read once (OpDef::plan_facts).
struct BlocksparsePlanFacts {
  int64_t block_q = 0, block_k = 0;
};

class BlocksparseOp final : public engine::OpDef {
 public:
  BlocksparseOp(std::string_view kernel_op, bool backward);

  void check(const engine::Bound& b) const override;
  void problem(const engine::Bound& b, engine::ProblemValues& v) const override;
  bool uses_plan_metadata() const override { return true; }
  void plan_metadata(const engine::Bound& b, const engine::PlanData& plan,
                     std::vector<unsigned char>& blob) const override;
  void plan_facts(const engine::PlanData& plan, void* facts) const override;
  engine::CpuWork cpu_prepare(const engine::Bound& b, const engine::PlanData& plan, void* params) const override;
  // CUDA (bsa_cuda.cpp): the layout is read on the device, nothing is planned.
  void cuda_launch(const engine::Bound& b, const engine::PlanData& plan, engine::CudaLaunchContext& lc) const override;
  Workspace cuda_workspace(const engine::Bound& b, const engine::PlanData& plan) const override;
  int64_t cuda_dynamic_smem(const VariantKey& key) const override;
  void reference(const engine::Bound& b, double* const* out) const override;
  double flops(const engine::Bound& b) const override;

  // The forward's parameters as both ops bind them (out and lse are inputs of the backward).
  FlashFwdParams forward_params(const engine::Bound& b) const;
  // The backward's parameters (dsoftmax_aux only where softmax_aux is given).
  FlashBwdParams backward_params(const engine::Bound& b) const;
  // The lists' sizes and block sizes (no pointers).
  BlocksparseLists list_shape(const engine::Bound& b) const;

  const bool backward;
  const int q, k, v, block_mask, q_segment_ids, kv_segment_ids, softmax_aux, out, lse;
  const int d_out, d_lse, dq, dk, dv, dsoftmax_aux;  // -1 in the forward
  const int softmax_scale, causal, sliding_window, logits_soft_cap, q_blocksize, kv_blocksize;
  const int sym_B, sym_Hq, sym_Hkv, sym_Sq, sym_Sk, sym_D, sym_S, sym_NQ, sym_NK;
  const int pv_block_q, pv_block_k;
};

const BlocksparseOp& blocksparse_attention_op();
const BlocksparseOp& blocksparse_attention_backward_op();

}  // namespace ejk::ops
