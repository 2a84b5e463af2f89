// The ragged paged attention family's CUDA launch, with the CUDA build: the block geometry
// (ragged_page_params.h), 16-byte chunk loads where the caches allow (and with them, for 16-bit
// D a multiple of 16, the one-token blocks' tensor-core decode), and one launch of
// query blocks plus, where the query starts are the caller's, the zero-fill blocks.
#include <fmt/format.h>

#include <algorithm>

#include "ejk/core/error.h"
#include "ejk/kernels/common/page_attention_params.h"
#include "engine/call.h"
#include "engine/cuda_exec.h"
#include "ops/ragged_page_attention/ragged_page_op.h"

namespace ejk::ops {

void RaggedPageFamilyOp::cuda_launch(const engine::Bound& b, const engine::PlanData&,
                                     engine::CudaLaunchContext& lc) const {
  RaggedPageParams p = params(b);
  if (p.tokens == 0 || p.q_heads == 0) return;
  const int64_t group = p.q_heads / p.kv_heads;
  p.cta_heads = ragged_cta_heads(group), p.cta_tokens = ragged_cta_tokens(group);
  // Device-resident starts: every sequence's blocks fit in floor(T / tokens) + S (see
  // ragged_first_block); one sequence of all tokens (no starts) needs ceil(T / tokens).
  // A decode batch takes one block per sequence (its one token), with no zero-fill blocks.
  const bool starts = p.query_start != nullptr && p.decode == 0;
  p.q_blocks = p.decode != 0 ? p.tokens
               : starts      ? p.tokens / p.cta_tokens + p.seqs
                             : ceil_div<int64_t>(p.tokens, p.cta_tokens);
  const int64_t blocks = p.q_blocks + (starts ? ceil_div<int64_t>(p.tokens, kRaggedZeroTokens) : 0);
  const int64_t rows = p.kv_heads * ceil_div<int64_t>(group, p.cta_heads);
  if (blocks > INT32_MAX || rows > 65535)
    throw InvalidArgument(fmt::format("{}: {} query blocks x {} (kv head, head group) rows exceed the grid", name(),
                                      blocks, rows));
  const int64_t esize = int64_t(dtype_size(b.dtype));
  p.vec = engine::chunks16_allowed(p.head_dim, esize, {p.k, p.v}, {p.k_sp, p.k_ss, p.k_sh, p.v_sp, p.v_ss, p.v_sh})
              ? 1 : 0;
  void* args[] = {&p};  // copied at the launch
  // One-token blocks run the tensor-core decode where page_uses_tc holds: the larger of the two.
  const int64_t smem = std::max(ragged_smem_bytes(p.head_dim, esize),
                                page_uses_tc(p.head_dim, esize, p.vec != 0) ? page_tc_smem_bytes(p.head_dim) : 0);
  lc.launch(0, engine::Grid{unsigned(blocks), unsigned(rows), 1}, kRaggedThreads, unsigned(smem), args);
}

}  // namespace ejk::ops
