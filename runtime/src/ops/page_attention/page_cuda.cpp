// page_attention's CUDA launch plan, with the CUDA build: the kernel (the tensor-core decode
// where page_uses_tc holds), the split count (num_splits, else the count of parts of at least
// 256 positions whose blocks fill the resident slots in the fewest waves), the stream scratch
// for the f32 partials, and the combine launch.
#include <fmt/format.h>

#include <algorithm>

#include "ejk/core/error.h"
#include "engine/call.h"
#include "engine/cuda_exec.h"
#include "ops/page_attention/page_op.h"

namespace ejk::ops {
namespace {

constexpr int64_t kMinSplitTokens = 256;

struct PageLaunch {
  PageAttentionParams p;
  int64_t blocks = 0, smem = 0;
  size_t scratch_bytes = 0;
};

// The automatic split count: the blocks of one split take `span / splits` positions each, so
// the call lasts about waves(splits) / splits, waves = ceil(units * splits / slots) for `slots`
// blocks resident at once; the smallest count within 2% of the best (fewer partials to merge).
int64_t auto_splits(int64_t units, int64_t slots, int64_t cap) {
  auto cost = [&](int64_t k) { return double(ceil_div<int64_t>(units * k, slots)) / double(k); };
  double best = cost(1);
  for (int64_t k = 2; k <= cap; ++k) best = std::min(best, cost(k));
  for (int64_t k = 1; k < cap; ++k)
    if (cost(k) <= best * 1.02) return k;
  return cap;
}

// dev null: the most splits any device can take (the workspace's bound).
PageLaunch plan_launch(const PageAttentionOp& op, const engine::Bound& b, const engine::PlanData& plan,
                       const cuda::DeviceInfo* dev) {
  PageLaunch l{op.params(b)};
  PageAttentionParams& p = l.p;
  const int64_t esize = int64_t(dtype_size(b.dtype));
  p.vec = dev && engine::chunks16_allowed(p.head_dim, esize, {p.k_cache, p.v_cache},
                                          {p.k_sb, p.k_sh, p.k_st, p.v_sb, p.v_sh, p.v_st}) ? 1 : 0;
  l.smem = page_uses_tc(p.head_dim, esize, p.vec != 0) ? page_tc_smem_bytes(p.head_dim) : page_smem_bytes(p.head_dim, esize);
  const int64_t head_groups = ceil_div<int64_t>(p.q_heads / std::max<int64_t>(p.kv_heads, 1), kPageMaxGroup);
  const int64_t units = std::max<int64_t>(1, p.seqs * p.kv_heads * head_groups);
  // The longest run of positions a sequence can see: the device's lengths are never read.
  const int64_t span = std::max<int64_t>(1, p.window > 0 ? std::min(p.window, p.max_context) : p.max_context);
  int64_t splits = 1;
  if (plan.facts_as<PageFacts>().split) {
    const int64_t asked = b.i64(op.num_splits), cap = ceil_div<int64_t>(span, kMinSplitTokens);
    if (asked > 0 || !dev) {
      splits = asked > 0 ? asked : cap;
    } else {
      // Blocks one SM holds at once: its shared memory (the opt-in limit plus the 1 KiB the
      // system keeps per block), at most 8.
      const int64_t per_sm = std::clamp<int64_t>((int64_t(dev->max_smem_optin) + 1024) / (l.smem + 1024), 1, 8);
      splits = auto_splits(units, int64_t(std::max(dev->sm_count, 1)) * per_sm, cap);
    }
  }
  p.split_tokens = ceil_div<int64_t>(ceil_div<int64_t>(span, splits), kPageTile) * kPageTile;
  p.splits = ceil_div<int64_t>(span, p.split_tokens);
  l.blocks = p.seqs * p.kv_heads * head_groups * p.splits;
  if (p.splits > 1) l.scratch_bytes = size_t(p.splits * p.seqs * p.q_heads * (p.head_dim + 1)) * sizeof(float);
  return l;
}

}  // namespace

engine::OpDef::Workspace PageAttentionOp::cuda_workspace(const engine::Bound& b, const engine::PlanData& plan) const {
  // Sized for the most splits any device of the plan's arch can take: the plan does not know
  // the SM count, so this uses the asked count or the span's cap.
  return {plan_launch(*this, b, plan, nullptr).scratch_bytes, 0};
}

void PageAttentionOp::cuda_launch(const engine::Bound& b, const engine::PlanData& plan,
                                  engine::CudaLaunchContext& lc) const {
  PageLaunch l = plan_launch(*this, b, plan, &lc.device());
  PageAttentionParams& p = l.p;
  if (l.blocks == 0) return;
  if (l.blocks > INT32_MAX)
    throw InvalidArgument(fmt::format("{}: {} (sequence, kv head, head group, split) blocks exceed the grid", name(),
                                      l.blocks));
  if (p.splits > 1) {
    p.part_out = static_cast<float*>(lc.scratch());
    p.part_lse = p.part_out + p.splits * p.seqs * p.q_heads * p.head_dim;
  }
  void* args[] = {&p};  // copied at each launch
  lc.launch(0, engine::Grid{unsigned(l.blocks), 1, 1}, kPageThreads, unsigned(l.smem), args);
  if (p.splits == 1) return;
  const int64_t rows = p.seqs * p.q_heads, rows_per_block = kPageCombineThreads / 32;
  const int64_t blocks = std::min<int64_t>(ceil_div<int64_t>(rows, rows_per_block), int64_t(lc.device().sm_count) * 8);
  lc.launch(1, engine::Grid{unsigned(blocks), 1, 1}, kPageCombineThreads, 0, args);
}

}  // namespace ejk::ops
