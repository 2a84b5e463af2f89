// ragged_page_attention_v2 through the engine: the checks its spec cannot state (GQA over the
// interleaved head axis, the host-resident lengths, starts and page tables), RaggedPageParams
// from the bound arguments (one function for the kernel and the reference), CPU tasks, and the
// float64 reference.
#pragma once
#include "ejk/kernels/common/ragged_page_params.h"
#include <string_view>

#include "engine/op_def.h"

namespace ejk::ops {

// What the family's ops share once each has made its RaggedPageParams from its own tensors: the
// CPU tasks (one per token and kv head), the CUDA launch (ragged_page_cuda.cpp) and the logit
// scalars.
class RaggedPageFamilyOp : public engine::OpDef {
 public:
  engine::CpuWork cpu_prepare(const engine::Bound& b, const engine::PlanData& plan, void* params) const override;
  void cuda_launch(const engine::Bound& b, const engine::PlanData& plan, engine::CudaLaunchContext& lc) const override;
  int64_t cuda_dynamic_smem(const VariantKey& key) const override;
  virtual RaggedPageParams params(const engine::Bound& b) const = 0;

 protected:
  // window_name: the op's sliding-window scalar, or null for an op without one.
  RaggedPageFamilyOp(const char* kernel, const char* soft_cap_name, const char* window_name = "sliding_window");
  // softmax_scale (default 1/sqrt(D)), the soft cap and sliding_window into p.
  void set_logits(RaggedPageParams& p, const engine::Bound& b) const;
  // 4 D per (query head, position) when every token counts as seeing the tables' capacity.
  static double capacity_flops(const RaggedPageParams& p);

  const int softmax_scale, soft_cap, sliding_window;
};

class RaggedPageAttentionOp final : public RaggedPageFamilyOp {
 public:
  RaggedPageAttentionOp();

  void check(const engine::Bound& b) const override;
  double flops(const engine::Bound& b) const override;
  void reference(const engine::Bound& b, double* const* out) const override;

  RaggedPageParams params(const engine::Bound& b) const override;

  // Spec indices, resolved once.
  const int queries, kv_pages, context_lens, block_tables, query_start_loc, num_seqs, softmax_aux, out;
  const int sym_T, sym_Hq, sym_D, sym_P, sym_PS, sym_H2, sym_S, sym_MB;

 private:
  void check_host_metadata(const engine::Bound& b) const;
};

const RaggedPageAttentionOp& ragged_page_attention_op();

// The sizes the host-resident metadata is checked against.
struct RaggedSizes {
  int64_t seqs, tokens, num_pages, page_size, max_pages, window;
  const char* lens_arg = "context_lens";  // the lengths' and the tables' argument names in messages
  const char* tables_arg = "block_tables";
  bool decode = false;  // one query per sequence, no query_start_loc: lengths from 0
};
// query_start_loc (seqs + 1 entries; not read for decode), context_lens and the block-table entries a query reaches,
// where they are on the CPU; InvalidArgument "<op>: <arg>[i]: ..." for the first bad entry.
void check_ragged_metadata(std::string_view op, const RaggedSizes& sizes, const TensorView& query_start_loc,
                           const TensorView& context_lens, const TensorView& block_tables);

// The family's float64 reference into a contiguous [T, Hq, D] output (and a contiguous [T, Hq]
// log-sum-exp where lse is not null): keys read from k and values from v through p's strides
// (v_offset elements past v's start), sequence by sequence.
void ragged_page_reference(const RaggedPageParams& p, const TensorView& q, const TensorView& k, const TensorView& v,
                           int64_t v_offset, double* out, double* lse);

}  // namespace ejk::ops
