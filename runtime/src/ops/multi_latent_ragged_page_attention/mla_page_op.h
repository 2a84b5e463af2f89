// multi_latent_ragged_page_attention through the engine: the checks its spec cannot state (the
// cache's packing and padded row, the flat block table, the host-resident lengths, starts and
// page tables), MlaPageParams from the bound arguments (one function for the kernel and the
// reference), CPU tasks, and the float64 reference.
#pragma once
#include "ejk/kernels/common/mla_page_params.h"
#include "engine/op_def.h"

namespace ejk::ops {

class MlaPageAttentionOp final : public engine::OpDef {
 public:
  MlaPageAttentionOp();

  void check(const engine::Bound& b) const override;
  engine::CpuWork cpu_prepare(const engine::Bound& b, const engine::PlanData& plan, void* params) const override;
#if EJK_HAVE_CUDA
  void cuda_launch(const engine::Bound& b, const engine::PlanData& plan, engine::CudaLaunchContext& lc) const override;
#endif
  int64_t cuda_dynamic_smem(const VariantKey& key) const override;
  double flops(const engine::Bound& b) const override;
  void reference(const engine::Bound& b, double* const* out) const override;

  MlaPageParams params(const engine::Bound& b) const;

  // Spec indices, resolved once.
  const int queries_nope, queries_pe, keys_values, keys_pe, kv_cache, kv_lens, block_tables, query_start_loc,
      distribution, out;
  const int softmax_scale, sliding_window, logits_soft_cap, q_scale, k_scale, v_scale;
  const int sym_T, sym_Hq, sym_R, sym_E, sym_P, sym_PSP, sym_PK, sym_KD, sym_S, sym_SMB;

 private:
  void check_host_metadata(const engine::Bound& b) const;
};

const MlaPageAttentionOp& mla_page_attention_op();

}  // namespace ejk::ops
