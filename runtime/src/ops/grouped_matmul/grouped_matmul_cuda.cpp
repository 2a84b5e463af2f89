// The CUDA launch plan of grouped matmul: the (d)lhs pass over row-tile slots that the kernel
// maps to groups from the device's group_sizes (never read back), and the backward's drhs
// pass. 16-bit operands whose contiguous dims, row strides and bases are 16-byte granular run
// the pipelined tensor-core kernel (cuda/grouped_matmul_tc.cuh, 128 x 128 or 128 x 256
// tiles); anything else the general one (cuda/grouped_matmul.cuh, 64 x 64). Built with CUDA only.
#include <fmt/format.h>

#include <climits>
#include <cstdint>

#include "ejk/core/error.h"
#include "engine/call.h"
#include "engine/cuda_exec.h"
#include "ops/grouped_matmul/grouped_matmul_op.h"

namespace ejk::ops {
namespace {

bool aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// The preconditions of the pipelined kernel: its cp.async copies move 8 elements (16 bytes) along
// each operand's contiguous dim (outputs may sit anywhere). An f32 d_out is first rounded to the
// dtype into a contiguous copy in the stream's scratch (what the general kernel does on load).
bool tc_eligible(const GroupedMatmulParams& p, bool backward, bool f32) {
  if (f32 || p.k % 8 != 0 || p.n % 8 != 0) return false;
  const bool rhs_rows = (p.rhs_n == 1 && p.rhs_k % 8 == 0) || (p.rhs_k == 1 && p.rhs_n % 8 == 0);
  if (!rhs_rows || p.rhs_g % 8 != 0 || !aligned(p.rhs, 16) || p.lhs_stride % 8 != 0 || !aligned(p.lhs, 16))
    return false;
  return !backward || p.d_out_f32 || (p.d_out_stride % 8 == 0 && aligned(p.d_out, 16));
}

// Bytes of the rounded d_out copy (0: none).
size_t d_out_copy_bytes(const GroupedMatmulParams& p, bool backward, bool f32) {
  if (!backward || !p.d_out_f32 || !tc_eligible(p, backward, f32)) return 0;
  return size_t(p.m) * size_t(p.n) * 2;
}

}  // namespace

engine::OpDef::Workspace GroupedMatmulOp::cuda_workspace(const engine::Bound& b, const engine::PlanData&) const {
  return {d_out_copy_bytes(params(b), backward, b.tensor(lhs).dtype == DType::f32), 0};
}

void GroupedMatmulOp::cuda_launch(const engine::Bound& b, const engine::PlanData&, engine::CudaLaunchContext& lc) const {
  GroupedMatmulParams p = params(b);
  const bool f32 = b.tensor(lhs).dtype == DType::f32, tc = tc_eligible(p, backward, f32);
  const int64_t tile = tc ? kGmmTcTile : kGmmTile;
  auto grid = [&](int64_t x, int64_t y, const char* what) {
    if (x > INT32_MAX || y > 65535)
      throw InvalidArgument(
          fmt::format("{}: {}: a grid of {} x {} tiles of {} exceeds CUDA's", name(), what, x, y, tile));
    return engine::Grid{unsigned(x), unsigned(y), 1};
  };
  void* args[] = {&p};  // copied at each launch
  const unsigned threads = tc ? kGmmTcThreads : kGmmThreads;
  // Tiles of 256 columns halve the shared-memory reads per product; narrower outputs keep 128.
  auto set_width = [&](int64_t cols) {
    p.tc_wide = tc && cols >= 256;
    return tc ? gmm_tc_cols(p.tc_wide) : kGmmTile;
  };
  auto smem = [&] { return tc ? unsigned(gmm_tc_smem_bytes(p.tc_wide)) : 0u; };
  const int64_t cols = backward ? p.k : p.n, slots = gmm_row_slots(p.m, p.groups, tile);
  const char* rows_what = backward ? "dlhs" : "out";
  if (d_out_copy_bytes(p, backward, f32) > 0 && (p.dlhs || p.drhs)) {
    p.phase = 4, p.d_out_copy = lc.scratch();
    lc.launch(0, grid(ceil_div<int64_t>(p.m * (p.n / 8), kGmmTcThreads), 1, "d_out copy"), threads, 0, args);
    p.d_out = p.d_out_copy, p.d_out_stride = p.n, p.d_out_f32 = 0;
  }
  if ((!backward || p.dlhs) && p.m > 0 && cols > 0) {
    p.phase = tc ? 2 : 0;
    const int64_t ct = ceil_div<int64_t>(cols, set_width(cols));
    // The pipelined kernel puts a slot's column tiles next to each other in one dimension.
    lc.launch(0, tc ? grid(slots * ct, 1, rows_what) : grid(slots, ct, rows_what), threads, smem(), args);
  }
  if (backward && p.drhs && p.groups > 0 && p.k > 0 && p.n > 0) {
    p.phase = tc ? 3 : 1;
    const int64_t kt = ceil_div<int64_t>(p.k, tile), nt = ceil_div<int64_t>(p.n, set_width(p.n));
    lc.launch(0, tc ? grid(p.groups * kt * nt, 1, "drhs") : grid(p.groups * kt, nt, "drhs"), threads, smem(), args);
  }
}

}  // namespace ejk::ops
