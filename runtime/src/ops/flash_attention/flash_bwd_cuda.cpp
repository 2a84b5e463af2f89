// The CUDA launch of flash_attention_backward. Bias variants and head dims that are no multiple
// of 16: the scalar kernel (kernels/ejk/kernels/cuda/flash_bwd.cuh), one block of one warp per
// task of flash_bwd_tasks, the f32 dbias sums in the stream's scratch. Everything else: the
// tensor-core kernels (flash_bwd_tc.cuh), four launches of the variant in stream order: delta
// into the scratch, dK/dV, dQ, and the sink rows' dsoftmax_aux. Built with CUDA only.
#include <fmt/format.h>

#include <array>
#include <climits>
#include <string>
#include <tuple>

#include "ejk/core/error.h"
#include "ejk/kernels/cuda/flash_bwd_launch.h"
#include "engine/call.h"
#include "engine/cuda_exec.h"
#include "ops/flash_attention/flash_args.h"
#include "ops/flash_attention/flash_bwd_op.h"

namespace ejk::ops {
namespace {

bool tensor_cores(const FlashBwdParams& p) { return cuda::flash_bwd_tensor_cores(p.fwd.bias != nullptr, p.fwd.head_dim); }

// Query rows of lse's layout (delta has it too).
int64_t lse_rows(const FlashBwdParams& p) {
  const FlashFwdParams& f = p.fwd;
  return f.heads_q * (f.cu_seqlens_q ? f.total_q : f.batch * f.seqlen_q);
}

size_t scratch_bytes(const FlashBwdParams& p) {
  if (tensor_cores(p)) return size_t(lse_rows(p)) * sizeof(float);
  if (!p.dbias) return 0;
  const FlashBwdPlanes pl = flash_bwd_planes(p);
  return size_t(pl.batches * pl.heads * p.fwd.seqlen_q * p.fwd.seqlen_k) * sizeof(float);
}

unsigned grid_of(const std::string& op, const char* what, int64_t blocks) {
  if (blocks > INT32_MAX) throw InvalidArgument(fmt::format("{}: {} {} blocks exceed the grid", op, blocks, what));
  return unsigned(blocks);
}

}  // namespace

engine::OpDef::Workspace FlashAttentionBackwardOp::cuda_workspace(const engine::Bound& b,
                                                                  const engine::PlanData&) const {
  return {scratch_bytes(params(b)), 0};
}

void FlashAttentionBackwardOp::cuda_launch(const engine::Bound& b, const engine::PlanData& plan,
                                           engine::CudaLaunchContext& lc) const {
  // Dropout keys take FlashBwdDropoutParams, which starts with FlashBwdParams; each launch copies
  // the size its kernel declares.
  FlashBwdDropoutParams full{};
  FlashBwdParams& p = full;
  p = params(b);
  if (flash_args::dropout_on(*this, b)) full.dropout = flash_args::dropout_params(*this, b);
  if (b.has(dbias) && !b.has(bias)) p.zero_dbias = b.data(dbias);
  if (b.has(dsoftmax_aux) && !b.has(softmax_aux)) p.zero_dsoftmax_aux = static_cast<float*>(b.data(dsoftmax_aux));
  void* args[] = {&full};  // copied at each launch
  if (!tensor_cores(p)) {
    p.phase = cuda::kBwdScalar;
    p.dbias_work = p.dbias ? static_cast<float*>(lc.scratch()) : nullptr;
    const int64_t tasks = flash_bwd_tasks(p, cuda::kFlashBwdBlock, cuda::kFlashBwdBlock).total();
    if (tasks == 0 && !p.zero_dbias && !p.zero_dsoftmax_aux) return;
    lc.launch(0, engine::Grid{grid_of(name(), "task", std::max<int64_t>(tasks, 1)), 1, 1}, cuda::kFlashBwdBlock, 0, args);
    return;
  }
  const auto& facts = plan.facts_as<FlashBwdPlanFacts>();
  const int64_t bq = facts.block_q, bk = facts.block_k, d = p.fwd.head_dim;
  const FlashFwdParams& f = p.fwd;
  for (const auto& [ptr, strides, what] :
       {std::tuple{f.q, std::array{f.q_stride_b, f.q_stride_s, f.q_stride_h}, "q"},
        std::tuple{f.k, std::array{f.k_stride_b, f.k_stride_s, f.k_stride_h}, "k"},
        std::tuple{f.v, std::array{f.v_stride_b, f.v_stride_s, f.v_stride_h}, "v"},
        std::tuple{p.d_out, std::array{p.do_stride_b, p.do_stride_s, p.do_stride_h}, "d_out"},
        std::tuple{static_cast<const void*>(p.dq), std::array{p.dq_stride_b, p.dq_stride_s, p.dq_stride_h}, "dq"},
        std::tuple{static_cast<const void*>(p.dk), std::array{p.dk_stride_b, p.dk_stride_s, p.dk_stride_h}, "dk"},
        std::tuple{static_cast<const void*>(p.dv), std::array{p.dv_stride_b, p.dv_stride_s, p.dv_stride_h}, "dv"}}) {
    bool ok = reinterpret_cast<uintptr_t>(ptr) % 16 == 0;
    for (int64_t s : strides) ok = ok && s % 8 == 0;
    if (!ok)
      throw InvalidArgument(fmt::format("{} (CUDA): {} must be 16-byte aligned with batch, sequence and head strides "
                                        "that are multiples of 8 elements", name(), what));
  }
  p.delta = static_cast<float*>(lc.scratch());
  constexpr int64_t kRowsPerBlock = cuda::kFlashBwdDeltaThreads / 32;
  p.phase = cuda::kBwdDelta;
  lc.launch(0, engine::Grid{grid_of(name(), "delta", std::max<int64_t>(ceil_div<int64_t>(lse_rows(p), kRowsPerBlock), 1)), 1, 1},
            cuda::kFlashBwdDeltaThreads, 0, args);
  p.phase = cuda::kBwdKv;
  lc.launch(0, engine::Grid{grid_of(name(), "dk/dv", f.batch * f.heads_kv * ceil_div<int64_t>(f.seqlen_k, bk)), 1, 1},
            unsigned(cuda::flash_bwd_kv_threads(bk)), unsigned(cuda::flash_bwd_kv_smem(d, bq, bk)), args);
  p.phase = cuda::kBwdQ;
  lc.launch(0, engine::Grid{grid_of(name(), "dq", f.batch * f.heads_q * ceil_div<int64_t>(f.seqlen_q, bq)), 1, 1},
            unsigned(cuda::flash_bwd_q_threads(bq)), unsigned(cuda::flash_bwd_q_smem(d, bq, bk)), args);
  if (const int64_t sinks = flash_bwd_tasks(p, bq, bk).sinks; sinks > 0) {
    p.phase = cuda::kBwdSinks;
    lc.launch(0, engine::Grid{unsigned(sinks), 1, 1}, cuda::kFlashBwdBlock, 0, args);
  }
}

}  // namespace ejk::ops
