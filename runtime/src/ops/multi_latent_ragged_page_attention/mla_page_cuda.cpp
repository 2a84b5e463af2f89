// multi_latent_ragged_page_attention's CUDA launch, with the CUDA build: a block per (token, 16
// query heads), 16-byte chunk loads where the latent rows and keys allow.
#include <fmt/format.h>

#include "ejk/core/error.h"
#include "engine/call.h"
#include "engine/cuda_exec.h"
#include "ops/multi_latent_ragged_page_attention/mla_page_op.h"

namespace ejk::ops {

void MlaPageAttentionOp::cuda_launch(const engine::Bound& b, const engine::PlanData&,
                                     engine::CudaLaunchContext& lc) const {
  MlaPageParams p = params(b);
  if (p.tokens == 0 || p.q_heads == 0) return;
  const int64_t head_blocks = ceil_div<int64_t>(p.q_heads, kMlaRows);
  if (p.tokens > INT32_MAX || head_blocks > 65535)
    throw InvalidArgument(fmt::format("{}: {} tokens x {} head blocks exceed the grid", name(), p.tokens, head_blocks));
  // The latent row (c, and k_pe at pe_offset) and the keys are read in 8-element chunks.
  const int64_t esize = int64_t(dtype_size(b.dtype));
  p.vec = engine::chunks16_allowed(p.latent, esize, {p.cache, p.new_c, p.new_pe},
                                   {p.rope, p.pe_offset, p.c_sp, p.c_sq, p.c_sk, p.nc_st, p.np_st})
              ? 1 : 0;
  void* args[] = {&p};  // copied at the launch
  lc.launch(0, engine::Grid{unsigned(p.tokens), unsigned(head_blocks), 1}, kMlaThreads,
            unsigned(mla_cuda_smem_bytes(p.latent, p.rope)), args);
}

}  // namespace ejk::ops
