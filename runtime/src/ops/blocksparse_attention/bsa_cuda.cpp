// The CUDA launches of blocksparse_attention and its backward, with the CUDA build: flash
// attention's sm_80 forward family (its geometry from flash_fwd_traits.cuh) over one CTA per (q
// block, q head, sequence), and flash's tensor-core backward (flash_bwd_launch.h), every block
// reading its layout row or columns on the device (kernels/ejk/kernels/cuda/blocksparse_fwd.cuh,
// blocksparse_bwd.cuh). Nothing is planned or copied on the host: a call costs its launches.
#include <fmt/format.h>

#include <algorithm>

#include "ejk/core/error.h"
#include "ejk/kernels/cuda/flash_bwd_launch.h"
#include "ejk/kernels/cuda/flash_fwd_traits.cuh"
#include "engine/call.h"
#include "engine/cuda_exec.h"
#include "ops/blocksparse_attention/bsa_op.h"
#include "ops/flash_attention/flash_bwd_tc_cuda.h"

namespace ejk::ops {
namespace {

cuda::FlashFwdSm80Geometry geometry(const VariantKey& key) {
  return {key.get_int("head_dim"), key.get_int("block_q"), key.get_int("block_k")};
}

// The layout as the kernels read it: strides of its broadcast (size-1) dims 0.
BlocksparseLayout device_layout(const engine::Bound& b, int block_mask, const BlocksparseLists& l) {
  BlocksparseLayout d{};
  d.block_q = l.block_q, d.block_k = l.block_k, d.num_q_blocks = l.num_q_blocks, d.num_k_blocks = l.num_k_blocks;
  if (!b.has(block_mask)) return d;
  const TensorView& m = b.tensor(block_mask);
  d.mask = static_cast<const unsigned char*>(m.data);
  d.stride_b = m.shape[0] == 1 ? 0 : m.strides[0];
  d.stride_h = m.shape[1] == 1 ? 0 : m.strides[1];
  d.stride_q = m.strides[2], d.stride_k = m.strides[3];
  return d;
}

// A block's queries lie in one layout row and its keys in one layout block (and the dK/dV
// block's keys in one layout column).
void require_tiles(const std::string& op, const BlocksparseLists& l, int64_t block_q, int64_t block_k, bool backward) {
  const char* takes = backward ? "the CUDA backward takes q_blocksize and kv_blocksize multiples of 64"
                               : "the CUDA kernels take q_blocksize a multiple of 64 and kv_blocksize a multiple of 16";
  if (l.block_q % block_q != 0)
    throw InvalidArgument(fmt::format("{} (CUDA): q_blocksize: {} is not a multiple of the kernel's block_q {}; {}", op,
                                      l.block_q, block_q, takes));
  if (l.block_k % block_k != 0)
    throw InvalidArgument(fmt::format("{} (CUDA): kv_blocksize: {} is not a multiple of the kernel's block_k {}; {}",
                                      op, l.block_k, block_k, takes));
}

int64_t lse_rows(const FlashFwdParams& f) { return f.heads_q * f.batch * f.seqlen_q; }

}  // namespace

int64_t BlocksparseOp::cuda_dynamic_smem(const VariantKey& key) const {
  // Plus the bitmaps of a call's layout rows or columns (bsa_bitmap_bytes, bsa_column_bitmap_bytes).
  if (backward) {
    const int64_t d = key.get_int("head_dim"), bq = key.get_int("block_q"), bk = key.get_int("block_k");
    return std::max(cuda::flash_bwd_kv_smem(d, bq, bk), cuda::flash_bwd_q_smem(d, bq, bk));
  }
  return geometry(key).smem_bytes();
}

engine::OpDef::Workspace BlocksparseOp::cuda_workspace(const engine::Bound& b, const engine::PlanData&) const {
  if (!backward) return {};
  return {size_t(lse_rows(forward_params(b))) * sizeof(float), 0};  // delta
}

void BlocksparseOp::cuda_launch(const engine::Bound& b, const engine::PlanData& plan,
                                engine::CudaLaunchContext& lc) const {
  const auto& f = plan.facts_as<BlocksparsePlanFacts>();
  const BlocksparseLists l = list_shape(b);
  require_tiles(name(), l, f.block_q, f.block_k, backward);
  constexpr int64_t kMaxGridYZ = 65535;
  if (!backward) {
    BlocksparseFwdCudaParams p{forward_params(b), device_layout(b, block_mask, l)};
    const FlashFwdParams& fp = p.f;
    require_flash_rows(name(), fp.head_dim,
                       {{fp.q, fp.q_stride_b, fp.q_stride_s, fp.q_stride_h, "q"},
                        {fp.k, fp.k_stride_b, fp.k_stride_s, fp.k_stride_h, "k"},
                        {fp.v, fp.v_stride_b, fp.v_stride_s, fp.v_stride_h, "v"},
                        {fp.out, fp.o_stride_b, fp.o_stride_s, fp.o_stride_h, "out"}});
    const cuda::FlashFwdSm80Geometry g = geometry(plan.key);
    if (fp.heads_q > kMaxGridYZ || fp.batch > kMaxGridYZ)
      throw InvalidArgument(fmt::format("{} (CUDA): {} q heads and batch {}: expected at most 65535 of each (the "
                                        "grid)", name(), fp.heads_q, fp.batch));
    const int64_t smem = g.smem_bytes() + bsa_bitmap_bytes(l.num_k_blocks);
    void* args[] = {&p};  // copied at the launch
    lc.launch(0, engine::Grid{flash_grid_x(name(), "q", g.grid_x(fp)), unsigned(fp.heads_q), unsigned(fp.batch)},
              unsigned(g.threads()), unsigned(smem), args);
    return;
  }
  BlocksparseBwdCudaParams p{backward_params(b), device_layout(b, block_mask, l)};
  FlashBwdParams& g = p.g;
  const FlashFwdParams& fp = g.fwd;
  if (b.has(dsoftmax_aux) && !b.has(softmax_aux)) g.zero_dsoftmax_aux = static_cast<float*>(b.data(dsoftmax_aux));
  void* args[] = {&p};  // copied at each launch
  require_flash_bwd_rows(name(), g);
  const int64_t group = fp.heads_q / fp.heads_kv;
  const int64_t sinks = bsa_bwd_tasks(BlocksparseBwdParams{g, {}}, f.block_q, f.block_k).sinks;
  launch_flash_bwd_tc(name(), g, args,
                      {f.block_q, f.block_k, lse_rows(fp), sinks, bsa_column_bitmap_bytes(group, l.num_q_blocks),
                       bsa_bitmap_bytes(l.num_k_blocks)},
                      lc);
}

}  // namespace ejk::ops
