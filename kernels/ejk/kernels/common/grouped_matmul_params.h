// Grouped matmul (MoE) and its backward: the parameters every kernel takes, and the semantics
// the kernels and the float64 reference share.
//
// lhs [m, k] holds the rows of every group, sorted by group; rhs [G, k, n] one matrix per
// computed group (stored [G, n, k] when transposed: only the strides differ). group_sizes
// [GS] (GS >= G) sizes all groups; the computed ones are offset .. offset + G - 1, offset from
// group_offset (default 0). Group i's rows are [start_i, end_i): start_i the sum of the sizes
// before it, both clamped to m; a negative size counts as 0 (the host rejects one it can read).
// out = lhs rows @ rhs[i - offset] for rows of computed groups, 0 for every other row (rows
// of other groups and rows past the sizes' sum), plus existing_out where given.
// Backward: dlhs = d_out @ rhs^T on computed rows (0 elsewhere); drhs[g] = lhs^T d_out over
// group offset + g's rows (0 for an empty group).
#pragma once
#include "ejk/kernels/common/base.h"

namespace ejk {

// A strided matrix operand: element (i, j) is at data + i * si + j * sj, in the variant's dtype
// or, with f32 set, in float32 (the f32 outputs and their gradients next to 16-bit inputs).
struct GmmMatrix {
  const void* data;
  i64 si, sj;
  i32 f32;
};

struct GroupedMatmulParams {
  const void* lhs;          // [m, k], rows lhs_stride apart, k contiguous
  const void* rhs;          // group g at rhs_g * g; (kk, nn) at kk * rhs_k + nn * rhs_n
  const i32* group_sizes;   // [total_groups], read by the kernels
  const i32* group_offset;  // [1] or null (offset 0), read by the kernels
  const void* existing_out; // forward: [m, n] added to out, or null
  void* out;                // forward: [m, n]
  const void* d_out;        // backward: [m, n]
  void* dlhs;               // backward: [m, k], or null
  void* drhs;               // backward: rhs's shape and strides (its own), or null
  i64 m, k, n, groups, total_groups;
  i64 lhs_stride, rhs_g, rhs_k, rhs_n;
  i64 existing_stride, out_stride, d_out_stride, dlhs_stride;
  i64 drhs_g, drhs_k, drhs_n;
  i32 existing_f32, out_f32, d_out_f32;  // that tensor is float32 (else the dtype)

  // The work split, filled by the runtime for the backend: row tiles of the (d)lhs pass and
  // tiles of the drhs pass (CPU tasks; CUDA blocks of each phase).
  i64 row_tiles, col_tiles, drhs_tiles;
  i32 phase;    // CUDA: 0 the (d)lhs pass, 1 drhs; 2 and 3 the same on the pipelined kernel, 4 its d_out copy
  i32 tc_wide;  // CUDA phases 2 and 3: output tiles of 128 x 256 (else 128 x 128)
  void* d_out_copy;  // CUDA phase 4: an f32 d_out rounded to the dtype, [m, n] contiguous
};

// CPU tiles of a task: kGmmCpuRows rows (of m, or of k in drhs) x kGmmCpuCols columns.
constexpr int kGmmCpuRows = 32, kGmmCpuCols = 64;

// CUDA: threads per block, the rows and columns of a block's output tile, and the sum elements
// per shared-memory refill.
constexpr int kGmmThreads = 128, kGmmTile = 64, kGmmStep = 32;

// The pipelined tensor-core kernel (cuda/grouped_matmul_tc.cuh, 16-bit operands whose
// contiguous dims are multiples of 8): 8 warps on a 128 x 128 output tile (warps of 64 x 32) or,
// with tc_wide, 128 x 256 (warps of 64 x 64); sums 32 at a time through kGmmTcStages
// shared-memory stages, each an A operand [128][32 + 8] or [32][128 + 8] and a B operand
// likewise with 128 or 256 columns (the padding spreads ldmatrix rows over the banks).
constexpr int kGmmTcThreads = 256, kGmmTcTile = 128, kGmmTcStep = 32, kGmmTcStages = 4;
EJK_HD constexpr int gmm_tc_cols(bool wide) { return wide ? 256 : 128; }
EJK_HD constexpr int gmm_tc_operand(int rows) { return rows * (kGmmTcStep + 8); }  // u16 elements
EJK_HD constexpr int gmm_tc_smem_bytes(bool wide) {
  return kGmmTcStages * (gmm_tc_operand(kGmmTcTile) + gmm_tc_operand(gmm_tc_cols(wide))) * 2;
}

// Slots of the CUDA (d)lhs pass's grid (row tiles of `tile` rows): an upper bound on its tiles.
EJK_HD i64 gmm_row_slots(i64 m, i64 groups, i64 tile) { return ceil_div(m, tile) + groups + 2; }

// The first computed group, clamped so that offset + G <= total_groups.
EJK_HD i64 gmm_offset(const GroupedMatmulParams& p) {
  if (p.group_offset == nullptr) return 0;
  return min_of(max_of((i64)p.group_offset[0], (i64)0), p.total_groups - p.groups);
}

EJK_HD i64 gmm_size(const GroupedMatmulParams& p, i64 i) { return max_of((i64)p.group_sizes[i], (i64)0); }

// Rows of computed group g (0 <= g < groups).
EJK_HD TokenSpan gmm_group_rows(const GroupedMatmulParams& p, i64 g) {
  const i64 first = gmm_offset(p) + g;
  i64 start = 0;
  for (i64 i = 0; i < first && start < p.m; ++i) start += gmm_size(p, i);
  start = min_of(start, p.m);
  return {start, min_of(start + gmm_size(p, first), p.m)};
}

// Calls f(g, a, e) for every computed group g with rows [a, e) meeting [lo, hi), in order.
template <class F> EJK_HD void gmm_groups_in(const GroupedMatmulParams& p, i64 lo, i64 hi, F&& f) {
  if (p.groups == 0) return;
  TokenSpan r = gmm_group_rows(p, 0);
  const i64 offset = gmm_offset(p);
  for (i64 g = 0; g < p.groups && r.begin < hi; ++g) {
    if (g > 0) r = {r.end, min_of(r.end + gmm_size(p, offset + g), p.m)};
    const i64 a = max_of(r.begin, lo), e = min_of(r.end, hi);
    if (a < e) f(g, a, e);
  }
}

// The (d)lhs pass's operands: out = A @ B over rows of group g. Forward: A = lhs, B = rhs[g];
// backward: A = d_out, B = rhs[g]^T (inner size n, output size k).
EJK_HD GmmMatrix gmm_a(const GroupedMatmulParams& p, bool backward) {
  return backward ? GmmMatrix{p.d_out, p.d_out_stride, 1, p.d_out_f32} : GmmMatrix{p.lhs, p.lhs_stride, 1, 0};
}
EJK_HD GmmMatrix gmm_b(const GroupedMatmulParams& p, bool backward, i64 g, i64 elem_bytes) {
  const void* base = static_cast<const char*>(p.rhs) + g * p.rhs_g * elem_bytes;
  return backward ? GmmMatrix{base, p.rhs_n, p.rhs_k, 0} : GmmMatrix{base, p.rhs_k, p.rhs_n, 0};
}
EJK_HD i64 gmm_inner(const GroupedMatmulParams& p, bool backward) { return backward ? p.n : p.k; }
EJK_HD i64 gmm_cols(const GroupedMatmulParams& p, bool backward) { return backward ? p.k : p.n; }

}  // namespace ejk
