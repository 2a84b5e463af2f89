// The CUDA launch of blocksparse_attention, with the CUDA build: flash attention's sm_80 family
// (its geometry from flash_fwd_traits.cuh) over one CTA per (q block, q head, sequence), each
// reading its layout row on the device (kernels/ejk/kernels/cuda/blocksparse_fwd.cuh). Nothing
// is planned or copied on the host: a call costs the launch.
#include <fmt/format.h>

#include "ejk/core/error.h"
#include "ejk/kernels/cuda/flash_fwd_traits.cuh"
#include "engine/call.h"
#include "engine/cuda_exec.h"
#include "ops/blocksparse_attention/bsa_op.h"

namespace ejk::ops {
namespace {

cuda::FlashFwdSm80Geometry geometry(const VariantKey& key) {
  return {key.get_int("head_dim"), key.get_int("block_q"), key.get_int("block_k")};
}

// The layout as the kernels read it: strides of its broadcast (size-1) dims 0.
BlocksparseLayout device_layout(const engine::Bound& b, int block_mask, const BlocksparseLists& l) {
  BlocksparseLayout d{};
  d.block_q = l.block_q, d.block_k = l.block_k, d.num_k_blocks = l.num_k_blocks;
  if (!b.has(block_mask)) return d;
  const TensorView& m = b.tensor(block_mask);
  d.mask = static_cast<const unsigned char*>(m.data);
  d.stride_b = m.shape[0] == 1 ? 0 : m.strides[0];
  d.stride_h = m.shape[1] == 1 ? 0 : m.strides[1];
  d.stride_q = m.strides[2], d.stride_k = m.strides[3];
  return d;
}

}  // namespace

int64_t BlocksparseOp::cuda_dynamic_smem(const VariantKey& key) const {
  return geometry(key).smem_bytes();  // plus the bitmaps of a call's layout row (bsa_bitmap_bytes)
}

void BlocksparseOp::cuda_launch(const engine::Bound& b, const engine::PlanData& plan,
                                engine::CudaLaunchContext& lc) const {
  if (backward) throw BackendUnavailable(fmt::format("{}: no CUDA kernels", name()));
  const auto& f = plan.facts_as<BlocksparsePlanFacts>();
  const BlocksparseLists l = list_shape(b);
  // A CTA's queries lie in one layout row and a kernel tile in one layout block.
  if (l.block_q % f.block_q != 0)
    throw InvalidArgument(fmt::format("{} (CUDA): q_blocksize: {} is not a multiple of the kernel's block_q {}; the "
                                      "CUDA kernels take q_blocksize a multiple of 64 and kv_blocksize a multiple "
                                      "of 16", name(), l.block_q, f.block_q));
  if (l.block_k % f.block_k != 0)
    throw InvalidArgument(fmt::format("{} (CUDA): kv_blocksize: {} is not a multiple of the kernel's block_k {}; the "
                                      "CUDA kernels take q_blocksize a multiple of 64 and kv_blocksize a multiple "
                                      "of 16", name(), l.block_k, f.block_k));
  BlocksparseFwdCudaParams p{forward_params(b), device_layout(b, block_mask, l)};
  const int64_t esize = int64_t(dtype_size(b.dtype));
  const FlashFwdParams& fp = p.f;
  const struct {
    const void* base;
    int64_t sb, ss, sh;
    const char* name;
  } rows[] = {{fp.q, fp.q_stride_b, fp.q_stride_s, fp.q_stride_h, "q"},
              {fp.k, fp.k_stride_b, fp.k_stride_s, fp.k_stride_h, "k"},
              {fp.v, fp.v_stride_b, fp.v_stride_s, fp.v_stride_h, "v"},
              {fp.out, fp.o_stride_b, fp.o_stride_s, fp.o_stride_h, "out"}};
  for (const auto& r : rows)
    if (!engine::chunks16_allowed(fp.head_dim, esize, {r.base}, {r.sb, r.ss, r.sh}))
      throw InvalidArgument(fmt::format("{} (CUDA): {} must be 16-byte aligned with batch, sequence and head strides "
                                        "that are multiples of 8 elements", name(), r.name));
  const cuda::FlashFwdSm80Geometry g = geometry(plan.key);
  constexpr int64_t kMaxGridYZ = 65535;
  if (fp.heads_q > kMaxGridYZ || fp.batch > kMaxGridYZ)
    throw InvalidArgument(fmt::format("{} (CUDA): {} q heads and batch {}: expected at most 65535 of each (the grid)",
                                      name(), fp.heads_q, fp.batch));
  if (g.grid_x(fp) >= (int64_t{1} << 31))
    throw InvalidArgument(fmt::format("{} (CUDA): {} q blocks per sequence; expected fewer than 2^31", name(),
                                      g.grid_x(fp)));
  const int64_t smem = g.smem_bytes() + bsa_bitmap_bytes(l.num_k_blocks);
  void* args[] = {&p};  // copied at the launch
  lc.launch(0, engine::Grid{unsigned(g.grid_x(fp)), unsigned(fp.heads_q), unsigned(fp.batch)}, unsigned(g.threads()),
            unsigned(smem), args);
}

}  // namespace ejk::ops
