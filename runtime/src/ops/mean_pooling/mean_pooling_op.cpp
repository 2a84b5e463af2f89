#include "ops/mean_pooling/mean_pooling_op.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <new>
#include <vector>

#include "ejk/core/error.h"
#include "engine/metadata.h"
#include "ops/mean_pooling/mean_pooling_reference.h"
#include "thread_pool.h"

namespace ejk::ops {
namespace {

[[noreturn]] void bad(const MeanPoolingOp& op, int tensor, const std::string& what) {
  throw InvalidArgument(fmt::format("{}: {}: {}", op.name(), op.schema().tensors()[tensor].name, what));
}


}  // namespace

MeanPoolingOp::MeanPoolingOp(std::string_view kernel_op, bool backward)
    : OpDef(kernel_op), backward(backward), tokens(tensor(backward ? "dx" : "x")), rows(tensor(backward ? "g" : "out")),
      cu_seqlens(tensor("cu_seqlens")), num_tokens(backward ? scalar("num_tokens") : -1),
      input(backward ? rows : tokens), output(backward ? tokens : rows),
      sym_B(symbol("B")), sym_T(symbol("T")), sym_D(symbol("D")), sym_N(symbol("N")) {}

void MeanPoolingOp::check(const engine::Bound& b) const {
  if (!b.known(sym_T))  // the backward without num_tokens and dx
    throw InvalidArgument(fmt::format("{}: num_tokens: required to size dx (tokens per sequence, or the packed "
                                      "total with cu_seqlens), unless dx is given", name()));
  const bool varlen = b.mode >= 0;
  if (varlen && b.size(sym_T) > INT32_MAX)
    bad(*this, tokens, fmt::format("{} packed tokens do not fit cu_seqlens' i32 entries", b.size(sym_T)));
  if (varlen && b.tensor(cu_seqlens).device.kind == DeviceKind::cpu && !b.args->shapes_only)
    engine::check_offsets(name(), "cu_seqlens", b.tensor(cu_seqlens), b.size(sym_T));
}

MeanPoolParams MeanPoolingOp::params(const engine::Bound& b) const {
  MeanPoolParams p{};
  const bool varlen = b.mode >= 0;
  p.tokens = b.data(tokens), p.rows = b.data(rows);
  p.sequences = b.size(varlen ? sym_N : sym_B);
  p.dim = b.size(sym_D);
  if (varlen) {
    p.cu_seqlens = static_cast<const i32*>(b.data(cu_seqlens));
    p.total = b.size(sym_T);
  } else {
    p.seqlen = b.size(sym_T);
    p.total = p.sequences * p.seqlen;
  }
  // A stride counts only along a dim of 2 or more (else 0, which the CUDA alignment test skips).
  auto stride = [&](int t, int pos, int64_t extent) { return b.has(t) && extent > 1 ? b.stride(t, pos) : 0; };
  p.tok_stride_b = varlen ? 0 : stride(tokens, 0, p.sequences);
  p.tok_stride_t = stride(tokens, varlen ? 0 : 1, varlen ? p.total : p.seqlen);
  p.row_stride = stride(rows, 0, p.sequences);
  return p;
}

engine::CpuWork MeanPoolingOp::cpu_prepare(const engine::Bound& b, const engine::PlanData&, void* params) const {
  static_assert(sizeof(MeanPoolParams) <= kParamBytes);
  MeanPoolParams& p = *new (params) MeanPoolParams(this->params(b));
  if (p.dim == 0 || p.sequences == 0) return {0};
  // Column tiles of whole vectors, at most kMeanPoolMaxColTile wide; chunks of at least 16 KiB of
  // tokens, about four tasks per thread.
  p.col_tiles = ceil_div<int64_t>(p.dim, kMeanPoolMaxColTile);
  p.col_tile = ceil_div<int64_t>(ceil_div<int64_t>(p.dim, p.col_tiles), 16) * 16;
  const int64_t min_chunk = std::max<int64_t>(1, 16384 / (p.col_tile * int64_t(dtype_size(b.dtype))));
  const int64_t tasks = std::max<int64_t>(1, 4 * ThreadPool::global().size() / p.col_tiles);
  p.chunk = std::max<int64_t>(min_chunk, ceil_div<int64_t>(p.total, tasks));
  p.chunks = std::max<int64_t>(1, ceil_div<int64_t>(p.total, p.chunk));
  if (!backward && p.chunks > 1) {
    // Partial sums of cut sequences and their arrival counts, in buffers of the calling thread
    // (reused by its next call; it waits for the tasks).
    thread_local std::vector<float> partials;
    thread_local std::vector<uint32_t> arrivals;
    partials.resize(std::max<size_t>(partials.size(), size_t(p.chunks * 2 * p.dim)));
    arrivals.assign(size_t(p.chunks * p.col_tiles), 0);
    p.partials = partials.data(), p.arrivals = arrivals.data();
  }
  return {p.chunks * p.col_tiles};
}

void MeanPoolingOp::reference(const engine::Bound& b, double* const* out) const {
  reference_mean_pool(params(b), backward, b.dtype, out[output]);
}

const MeanPoolingOp& mean_pooling_op() {
  static const MeanPoolingOp op("mean_pool_fwd", false);
  return op;
}

const MeanPoolingOp& mean_pooling_backward_op() {
  static const MeanPoolingOp op("mean_pool_bwd", true);
  return op;
}

EJK_REGISTER_OP(mean_pooling_op);
EJK_REGISTER_OP(mean_pooling_backward_op);

}  // namespace ejk::ops
