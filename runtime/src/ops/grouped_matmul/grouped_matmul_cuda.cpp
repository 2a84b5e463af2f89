// The CUDA launch plan of grouped matmul (kernels/ejk/kernels/cuda/grouped_matmul.cuh): the
// (d)lhs pass over ceil(m / 64) + G + 2 tile slots that the kernel maps to groups from the
// device's group_sizes (never read back), and the backward's drhs pass. Built with CUDA only.
#include <fmt/format.h>

#include <climits>

#include "ejk/core/error.h"
#include "engine/call.h"
#include "engine/cuda_exec.h"
#include "ops/grouped_matmul/grouped_matmul_op.h"

namespace ejk::ops {

void GroupedMatmulOp::cuda_launch(const engine::Bound& b, const engine::PlanData&, engine::CudaLaunchContext& lc) const {
  GroupedMatmulParams p = params(b);
  auto grid = [&](int64_t x, int64_t y, const char* what) {
    if (x > INT32_MAX || y > 65535)
      throw InvalidArgument(fmt::format("{}: {}: a grid of {} x {} tiles of 64 exceeds CUDA's", name(), what, x, y));
    return engine::Grid{unsigned(x), unsigned(y), 1};
  };
  void* args[] = {&p};  // copied at each launch
  const int64_t rows_cols = backward ? p.k : p.n;
  if ((!backward || p.dlhs) && p.m > 0 && rows_cols > 0) {
    p.phase = 0;
    lc.launch(0, grid(gmm_row_slots(p.m, p.groups), ceil_div<int64_t>(rows_cols, kGmmTile), backward ? "dlhs" : "out"),
              kGmmThreads, 0, args);
  }
  if (backward && p.drhs && p.groups > 0 && p.k > 0 && p.n > 0) {
    p.phase = 1;
    lc.launch(0, grid(p.groups * ceil_div<int64_t>(p.k, kGmmTile), ceil_div<int64_t>(p.n, kGmmTile), "drhs"),
              kGmmThreads, 0, args);
  }
}

}  // namespace ejk::ops
