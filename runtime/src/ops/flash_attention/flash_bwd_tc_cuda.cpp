// The flash tensor-core backward's launches (flash_bwd_tc_cuda.h). Built with CUDA only.
#include "ops/flash_attention/flash_bwd_tc_cuda.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>

#include "ejk/core/error.h"
#include "ejk/kernels/cuda/flash_bwd_launch.h"

namespace ejk::ops {

unsigned flash_grid_x(const std::string& op, const char* what, int64_t blocks) {
  if (blocks > INT32_MAX) throw InvalidArgument(fmt::format("{}: {} {} blocks exceed the grid", op, blocks, what));
  return unsigned(blocks);
}

void require_flash_rows(const std::string& op, int64_t head_dim, std::initializer_list<FlashRows> rows) {
  for (const FlashRows& r : rows)
    if (!engine::chunks16_allowed(head_dim, 2, {r.base}, {r.sb, r.ss, r.sh}))
      throw InvalidArgument(fmt::format("{} (CUDA): {} must be 16-byte aligned with batch, sequence and head strides "
                                        "that are multiples of 8 elements", op, r.name));
}

void require_flash_bwd_rows(const std::string& op, const FlashBwdParams& p) {
  const FlashFwdParams& f = p.fwd;
  require_flash_rows(op, f.head_dim,
                     {{f.q, f.q_stride_b, f.q_stride_s, f.q_stride_h, "q"},
                      {f.k, f.k_stride_b, f.k_stride_s, f.k_stride_h, "k"},
                      {f.v, f.v_stride_b, f.v_stride_s, f.v_stride_h, "v"},
                      {p.d_out, p.do_stride_b, p.do_stride_s, p.do_stride_h, "d_out"},
                      {p.dq, p.dq_stride_b, p.dq_stride_s, p.dq_stride_h, "dq"},
                      {p.dk, p.dk_stride_b, p.dk_stride_s, p.dk_stride_h, "dk"},
                      {p.dv, p.dv_stride_b, p.dv_stride_s, p.dv_stride_h, "dv"}});
}

void launch_flash_bwd_tc(const std::string& op, FlashBwdParams& p, void** args, const FlashBwdTcLaunch& l,
                         engine::CudaLaunchContext& lc) {
  const FlashFwdParams& f = p.fwd;
  const int64_t bq = l.block_q, bk = l.block_k, d = f.head_dim;
  p.delta = static_cast<float*>(lc.scratch());
  constexpr int64_t kRowsPerBlock = cuda::kFlashBwdDeltaThreads / 32;
  p.phase = cuda::kBwdDelta;
  lc.launch(0, engine::Grid{flash_grid_x(op, "delta", std::max<int64_t>(ceil_div<int64_t>(l.lse_rows, kRowsPerBlock), 1))},
            cuda::kFlashBwdDeltaThreads, 0, args);
  p.phase = cuda::kBwdKv;
  lc.launch(0, engine::Grid{flash_grid_x(op, "dk/dv", f.batch * f.heads_kv * ceil_div<int64_t>(f.seqlen_k, bk))},
            unsigned(cuda::flash_bwd_kv_threads(bk)), unsigned(cuda::flash_bwd_kv_smem(d, bq, bk) + l.kv_extra_smem),
            args);
  p.phase = cuda::kBwdQ;
  const cuda::FlashBwdDqShape dq = cuda::flash_bwd_dq_shape(l.wgmma, bq, bk);
  lc.launch(0, engine::Grid{flash_grid_x(op, "dq", f.batch * f.heads_q * ceil_div<int64_t>(f.seqlen_q, dq.rows))},
            unsigned(cuda::flash_bwd_q_threads(dq.rows)),
            unsigned(cuda::flash_bwd_q_smem(d, dq.rows, dq.tile) + l.q_extra_smem), args);
  if (l.sinks > 0) {
    p.phase = cuda::kBwdSinks;
    lc.launch(0, engine::Grid{unsigned(l.sinks)}, cuda::kFlashBwdBlock, 0, args);
  }
}

}  // namespace ejk::ops
