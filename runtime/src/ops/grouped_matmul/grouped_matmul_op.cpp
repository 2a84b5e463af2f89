#include "ops/grouped_matmul/grouped_matmul_op.h"

#include <fmt/format.h>

#include <new>

#include "ejk/core/error.h"
#include "engine/elements.h"
#include "ops/grouped_matmul/grouped_matmul_reference.h"

namespace ejk::ops {
GroupedMatmulOp::GroupedMatmulOp(std::string_view kernel_op, bool backward)
    : OpDef(kernel_op), backward(backward), lhs(tensor("lhs")), rhs(tensor("rhs")), rhs_t(tensor("rhs_t")),
      group_sizes(tensor("group_sizes")), group_offset(tensor("group_offset")),
      existing_out(backward ? -1 : tensor("existing_out")), out(backward ? -1 : tensor("out")),
      d_out(backward ? tensor("d_out") : -1), dlhs(backward ? tensor("dlhs") : -1), drhs(backward ? tensor("drhs") : -1),
      sym_M(symbol("M")), sym_K(symbol("K")), sym_N(symbol("N")), sym_G(symbol("G")), sym_GS(symbol("GS")) {}

void GroupedMatmulOp::check(const engine::Bound& b) const {
  if (!b.has(rhs) && !b.has(rhs_t))
    throw InvalidArgument(fmt::format("{}: rhs: required ([G, K, N]), or rhs_t ([G, N, K]) for weights stored "
                                      "transposed", name()));
  if (b.size(sym_G) > b.size(sym_GS))
    throw InvalidArgument(fmt::format("{}: group_sizes: dim 0 (GS) must be at least G = {} (rhs's groups), got {}",
                                      name(), b.size(sym_G), b.size(sym_GS)));
  if (b.args->shapes_only) return;
  const TensorView& sizes = b.tensor(group_sizes);
  if (sizes.device.kind == DeviceKind::cpu)
    for (int64_t i = 0; i < sizes.numel(); ++i)
      if (const double v = engine::read_as_double(sizes, i); v < 0)
        throw InvalidArgument(fmt::format("{}: group_sizes: entry {} must be at least 0, got {}", name(), i, v));
  if (b.has(group_offset) && b.tensor(group_offset).device.kind == DeviceKind::cpu) {
    const double v = engine::read_as_double(b.tensor(group_offset), 0);
    const int64_t last = b.size(sym_GS) - b.size(sym_G);
    if (v < 0 || v > double(last))
      throw InvalidArgument(fmt::format("{}: group_offset: must be in [0, {}] (GS - G), got {}", name(), last, v));
  }
}

GroupedMatmulParams GroupedMatmulOp::params(const engine::Bound& b) const {
  GroupedMatmulParams p{};
  const bool transposed = b.mode >= 0;
  const int w = transposed ? rhs_t : rhs;
  p.lhs = b.data(lhs), p.rhs = b.data(w);
  p.group_sizes = static_cast<const i32*>(b.data(group_sizes));
  p.group_offset = b.has(group_offset) ? static_cast<const i32*>(b.data(group_offset)) : nullptr;
  p.m = b.size(sym_M), p.k = b.size(sym_K), p.n = b.size(sym_N);
  p.groups = b.size(sym_G), p.total_groups = b.size(sym_GS);
  p.lhs_stride = b.stride(lhs, 0);
  // rhs [G, K, N] or rhs_t [G, N, K]: the kernels address (g, k, n) through three strides.
  p.rhs_g = b.stride(w, 0);
  p.rhs_k = b.stride(w, transposed ? 2 : 1), p.rhs_n = b.stride(w, transposed ? 1 : 2);
  auto is_f32 = [&](int t) { return int32_t(b.has(t) && b.tensor(t).dtype == DType::f32); };
  if (!backward) {
    if (b.has(out)) p.out = b.data(out), p.out_stride = b.stride(out, 0), p.out_f32 = is_f32(out);
    if (b.has(existing_out))
      p.existing_out = b.data(existing_out), p.existing_stride = b.stride(existing_out, 0),
      p.existing_f32 = is_f32(existing_out);
    return p;
  }
  p.d_out = b.data(d_out), p.d_out_stride = b.stride(d_out, 0), p.d_out_f32 = is_f32(d_out);
  if (b.has(dlhs)) p.dlhs = b.data(dlhs), p.dlhs_stride = b.stride(dlhs, 0);
  if (b.has(drhs)) {
    p.drhs = b.data(drhs), p.drhs_g = b.stride(drhs, 0);
    p.drhs_k = b.stride(drhs, transposed ? 2 : 1), p.drhs_n = b.stride(drhs, transposed ? 1 : 2);
  }
  return p;
}

engine::CpuWork GroupedMatmulOp::cpu_prepare(const engine::Bound& b, const engine::PlanData&, void* params) const {
  static_assert(sizeof(GroupedMatmulParams) <= kParamBytes);
  GroupedMatmulParams& p = *new (params) GroupedMatmulParams(this->params(b));
  const bool rows_pass = !backward || p.dlhs != nullptr;
  p.row_tiles = rows_pass ? ceil_div<int64_t>(p.m, kGmmCpuRows) : 0;
  p.col_tiles = ceil_div<int64_t>(backward ? p.k : p.n, kGmmCpuCols);
  p.drhs_tiles = p.drhs ? p.groups * ceil_div<int64_t>(p.k, kGmmCpuRows) * ceil_div<int64_t>(p.n, kGmmCpuCols) : 0;
  return {p.row_tiles * p.col_tiles + p.drhs_tiles};
}

void GroupedMatmulOp::reference(const engine::Bound& b, double* const* outs) const {
  const GroupedMatmulParams p = params(b);
  GmmRefOut r;
  DType existing = b.dtype, dout = b.dtype;
  if (backward) {
    r.dlhs = outs[dlhs], r.drhs = outs[drhs];
    r.drhs_transposed = b.mode >= 0;
    dout = b.tensor(d_out).dtype;
  } else {
    r.out = outs[out];
    if (b.has(existing_out)) existing = b.tensor(existing_out).dtype;
  }
  reference_grouped_matmul(p, b.dtype, existing, dout, r);
}

const GroupedMatmulOp& grouped_matmul_op() {
  static const GroupedMatmulOp op("gmm_fwd", false);
  return op;
}

const GroupedMatmulOp& grouped_matmul_backward_op() {
  static const GroupedMatmulOp op("gmm_bwd", true);
  return op;
}

EJK_REGISTER_OP(grouped_matmul_op);
EJK_REGISTER_OP(grouped_matmul_backward_op);

}  // namespace ejk::ops
