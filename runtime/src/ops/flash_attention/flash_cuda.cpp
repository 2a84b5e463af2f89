#include "ops/flash_attention/flash_cuda.h"

#include <fmt/format.h>

#include <algorithm>

#include "ejk/core/error.h"
#include "cuda/tma_map.h"
#include "ejk/kernels/cuda/flash_fwd_traits.cuh"
#include "engine/call.h"
#include "ops/flash_attention/flash_args.h"
#include "ops/flash_attention/flash_mask_tiles_cuda.h"
#include "ops/flash_attention/flash_op.h"

namespace ejk::ops {

using cuda::FlashFwdLaunchFacts;
using cuda::FlashFwdSm80Geometry;
using cuda::FlashFwdSm90Geometry;
using cuda::FlashFwdTensorMaps;

namespace {

FlashFwdLaunchFacts launch_facts(const FlashKeyFacts& f) {
  return cuda::flash_fwd_launch_facts(f.wgmma, f.head_dim, f.block_q, f.block_k, f.per_item, f.bias);
}

void require_chunked(const void* ptr, std::initializer_list<int64_t> strides, const char* name) {
  bool ok = reinterpret_cast<uintptr_t>(ptr) % 16 == 0;
  for (int64_t s : strides) ok = ok && s % 8 == 0;
  if (!ok)
    throw InvalidArgument(fmt::format("flash_attention (CUDA): {} must be 16-byte aligned with batch, sequence and "
                                      "head strides that are multiples of 8 elements", name));
}

// The q, k, v and out tensor maps of the sm90a family, and the bias's for a key that stages it
// (flash_fwd_tma_view says what each covers).
FlashFwdTensorMaps encode_tensor_maps(const FlashFwdParams& p, const FlashLaunchShape& shape) {
  const FlashFwdSm90Geometry g{shape.head_dim, shape.block_q, shape.block_k};
  FlashFwdTensorMaps maps{};
  for (cuda::FlashTensor t : cuda::flash_fwd_tensors(p, shape.bias_chunks))
    cuda::tensor_map(maps, t) =
        cuda::encode_tma_map(cuda::flash_fwd_tma_view(p, t, g), cuda::tma_format_16bit_sw128(),
                             {"flash_attention", "CUDA sm90a", cuda::flash_tensor_name(t)});
  return maps;
}

// The bias copy's rows for p: positions in a sequence, broadcast axes kept at 1.
FlashFwdBiasRows bias_rows(const FlashFwdParams& p) {
  FlashFwdBiasRows c{};
  c.src = static_cast<const u16*>(p.bias);
  c.stride_b = p.bias_stride_b, c.stride_h = p.bias_stride_h, c.stride_q = p.bias_stride_q;
  const FlashFwdBiasExtent e = flash_fwd_bias_extent(p);
  c.batches = e.batches, c.heads = e.heads, c.rows = e.rows;
  c.keys = p.seqlen_k;
  c.pitch = flash_fwd_bias_pitch(c.keys);
  return c;
}

// Copies p's bias into rows of a pitch that is a multiple of 8 elements (what both the TMA boxes
// and the 4-byte pairs read in place) in the stream's scratch, and points p there.
void align_bias(engine::CudaLaunchContext& lc, FlashFwdParams& p) {
  FlashFwdBiasRows c = bias_rows(p);
  c.dst = static_cast<u16*>(lc.scratch());
  const int64_t planes = c.batches * c.heads;
  if (planes > 0 && c.rows > 0 && c.keys > 0) {
    constexpr int64_t kWarps = 8;  // 256 threads: one row per warp at a time
    // About one wave (8 blocks per SM) over (rows, heads, batches); the warps walk the rest.
    const int64_t per_plane = std::max<int64_t>(1, 8 * int64_t(lc.device().sm_count) / planes);
    const engine::Grid grid{unsigned(std::min<int64_t>(ceil_div<int64_t>(c.rows, kWarps), per_plane)),
                            unsigned(std::min<int64_t>(c.heads, 65535)), unsigned(std::min<int64_t>(c.batches, 65535))};
    void* args[] = {&c};
    lc.launch(1, grid, 32 * kWarps, 0, args);
  }
  p.bias = c.dst;
  p.bias_stride_q = p.bias_stride_q == 0 ? 0 : c.pitch;
  p.bias_stride_h = c.heads > 1 ? c.rows * c.pitch : 0;
  p.bias_stride_b = c.batches > 1 ? c.heads * c.rows * c.pitch : 0;
}

}  // namespace

FlashKeyFacts flash_key_facts(const OpSchema& schema, const VariantKey& key) {
  FlashKeyFacts f;
  const TargetDef* t = schema.backend("cuda").find_target(key.target);
  // Dropout and dense-mask keys run the sm80 family everywhere (flash_fwd.cuh).
  f.dense_mask = key.get_flag("dmask");
  f.wgmma = t != nullptr && t->vars.at("sm") >= 90 && !key.get_flag("dropout") && !f.dense_mask;
  f.per_item = key.get_flag("per_item"), f.bias = key.get_flag("bias");
  f.head_dim = key.get_int("head_dim"), f.block_q = key.get_int("block_q"), f.block_k = key.get_int("block_k");
  return f;
}

int64_t flash_fwd_smem_bytes(const FlashKeyFacts& f) { return launch_facts(f).smem_bytes; }

FlashLaunchShape flash_fwd_launch_shape(const FlashKeyFacts& k, const FlashFwdParams& p, int sm_count) {
  const FlashFwdLaunchFacts f = launch_facts(k);
  if (!f.valid)
    throw InvalidArgument(fmt::format("flash_attention (CUDA): variant d{}.bq{}.bk{}: expected head_dim a multiple of 16 "
                                      "in [16, 256], block_q 64 or 128 (or 192 at head_dim <= 64 on sm90a), block_k a "
                                      "multiple of 16 in [16, 128] (on sm90a from 64: up to 256 where the accumulators "
                                      "fit the registers and the tiles 227 KiB)", k.head_dim, k.block_q, k.block_k));
  FlashLaunchShape s;
  if (f.wgmma) {
    const FlashFwdSm90Geometry g{k.head_dim, k.block_q, k.block_k, 0, cuda::flash_fwd_schedule(k.per_item)};
    // The kernel decodes work items in 32-bit arithmetic (flash_fwd_sm90_schedule.cuh sm90_block).
    if (const int64_t items = g.work_items(p); items >= (int64_t{1} << 31))
      throw InvalidArgument(fmt::format("flash_attention (CUDA sm90a): {} work items (q blocks x heads x sequences); "
                                        "expected fewer than 2^31", items));
    s.grid[0] = unsigned(g.blocks(p, sm_count));  // 1-D
    s.tma = true;
  } else {
    const FlashFwdSm80Geometry g{k.head_dim, k.block_q, k.block_k};
    // Heads on gridDim.y, sequences on gridDim.z, sliced into launches of at most 65535 of each
    // (whole GQA groups): a 1-D grid decoded in the kernel changed nvcc's register allocation
    // and cost 15-20% on several keys (docs/design/flash_fwd_cuda.md).
    constexpr int64_t kMaxGridYZ = 65535;
    const int64_t group = p.heads_kv > 0 ? p.heads_q / p.heads_kv : 1;
    if (group > kMaxGridYZ)
      throw InvalidArgument(fmt::format("flash_attention (CUDA sm80 family): {} q heads per kv head; expected at most "
                                        "65535 (the grid's limit)", group));
    if (g.grid_x(p) >= (int64_t{1} << 31))
      throw InvalidArgument(fmt::format("flash_attention (CUDA sm80 family): {} q blocks per sequence; expected fewer "
                                        "than 2^31", g.grid_x(p)));
    s.heads_q = g.grid_y(p), s.sequences = g.grid_z(p);
    s.grid[0] = unsigned(g.grid_x(p));
    s.grid[1] = unsigned(std::min(s.heads_q, kMaxGridYZ / group * group));
    s.grid[2] = unsigned(std::min(s.sequences, kMaxGridYZ));
  }
  s.block = unsigned(f.threads);
  s.smem_bytes = unsigned(f.smem_bytes);
  s.bias_chunks = f.bias_chunks;
  s.head_dim = k.head_dim, s.block_q = k.block_q, s.block_k = k.block_k;
  return s;
}

int64_t FlashLaunchShape::launches() const {
  if (tma || grid[1] == 0 || grid[2] == 0) return 1;
  return ceil_div(heads_q, int64_t(grid[1])) * ceil_div(sequences, int64_t(grid[2]));
}

FlashFwdParams flash_fwd_slice(const FlashFwdParams& p, int64_t h0, int64_t nh, int64_t z0, int64_t nz) {
  const int64_t group = p.heads_q / p.heads_kv;
  auto at = [](const void* base, int64_t elems) {
    return static_cast<const char*>(base) + elems * cuda::kElemBytesOf16Bit;
  };
  FlashFwdParams s = p;
  s.heads_q = nh, s.heads_kv = nh / group, s.batch = nz;
  // Heads: q, out, lse, bias and sinks per q head; k and v per kv head.
  s.q = at(p.q, h0 * p.q_stride_h);
  s.k = at(p.k, h0 / group * p.k_stride_h);
  s.v = at(p.v, h0 / group * p.v_stride_h);
  s.out = const_cast<char*>(at(p.out, h0 * p.o_stride_h));
  s.lse = p.lse + h0 * p.lse_stride_h;
  if (p.bias) s.bias = at(p.bias, h0 * p.bias_stride_h + z0 * p.bias_stride_b);
  if (p.softmax_aux) s.softmax_aux = p.softmax_aux + h0 * p.sinks_stride_h;
  // Sequences: segment ids by sequence either way; dense tensors by their batch stride, packed
  // ones through cu_seqlens (absolute token offsets).
  if (p.q_segment_ids) s.q_segment_ids = p.q_segment_ids + z0 * p.q_seg_stride_b;
  if (p.kv_segment_ids) s.kv_segment_ids = p.kv_segment_ids + z0 * p.kv_seg_stride_b;
  if (p.cu_seqlens_q != nullptr) {
    s.cu_seqlens_q = p.cu_seqlens_q + z0;
    s.cu_seqlens_k = p.cu_seqlens_k + z0;
  } else {
    s.q = at(s.q, z0 * p.q_stride_b);
    s.k = at(s.k, z0 * p.k_stride_b);
    s.v = at(s.v, z0 * p.v_stride_b);
    s.out = const_cast<char*>(at(s.out, z0 * p.o_stride_b));
    s.lse += z0 * p.lse_stride_b;
  }
  return s;
}

bool bias_reads_in_place(const FlashFwdParams& p, bool chunks) {
  if (p.bias == nullptr) return true;
  // Elements per aligned unit (a power of 2): the TMA's 16 bytes, or a pair of keys.
  const int64_t unit = chunks ? 8 : 2;
  // The TMA reads no key past the map's Sk; a pair reads key len_k beside key len_k - 1, which
  // an even extent holds.
  const int64_t extent = chunks ? 0 : p.seqlen_k;
  return reinterpret_cast<uintptr_t>(p.bias) % uintptr_t(2 * unit) == 0 &&
         ((p.bias_stride_b | p.bias_stride_h | p.bias_stride_q | extent) & (unit - 1)) == 0;
}

size_t bias_copy_bytes(const FlashFwdParams& p, bool chunks) {
  if (bias_reads_in_place(p, chunks)) return 0;
  const FlashFwdBiasRows c = bias_rows(p);
  return size_t(c.batches * c.heads * c.rows) * size_t(c.pitch) * cuda::kElemBytesOf16Bit;
}

void launch_flash_fwd(engine::CudaLaunchContext& lc, const FlashLaunchShape& shape, FlashFwdParams p,
                      const DropoutParams* dropout) {
  require_chunked(p.q, {p.q_stride_b, p.q_stride_s, p.q_stride_h}, "q");
  require_chunked(p.k, {p.k_stride_b, p.k_stride_s, p.k_stride_h}, "k");
  require_chunked(p.v, {p.v_stride_b, p.v_stride_s, p.v_stride_h}, "v");
  require_chunked(p.out, {p.o_stride_b, p.o_stride_s, p.o_stride_h}, "out");
  if (shape.grid[0] == 0 || shape.grid[1] == 0 || shape.grid[2] == 0) return;  // empty problem
  const size_t bias_bytes = bias_copy_bytes(p, shape.bias_chunks);  // before align_bias moves the bias
  if (!bias_reads_in_place(p, shape.bias_chunks)) align_bias(lc, p);
  if (p.dense_mask != nullptr) {
    // The summary indexes sequences and heads from 0: one launch only (no slices).
    if (shape.launches() != 1)
      throw InvalidArgument(fmt::format("flash_attention (CUDA): attention_mask: with more than {} heads or {} sequences "
                                        "(one launch) is not supported", shape.grid[1], shape.grid[2]));
    // Kernel 1 + bias: the companions' order (FlashAttentionOp::companions).
    const size_t at = mask_tiles_offset(bias_bytes);
    launch_mask_tiles(lc, p.bias != nullptr ? 2 : 1, p, shape.block_q, shape.block_k,
                      static_cast<unsigned char*>(lc.scratch()) + at);
  }
  // After align_bias: a staged bias's map covers the rows the kernel reads.
  FlashFwdTensorMaps maps = shape.tma ? encode_tensor_maps(p, shape) : FlashFwdTensorMaps{};
  if (shape.tma && p.tile_counter == nullptr) p.tile_counter = lc.counters();
  // The kernel takes FlashFwdParams (dropout keys: FlashFwdDropoutParams, which starts with it; the
  // launch copies the size the kernel declares) and the tensor maps by value (__grid_constant__).
  auto launch = [&](FlashFwdParams params, unsigned grid_y, unsigned grid_z) {
    FlashFwdDropoutParams full{};
    static_cast<FlashFwdParams&>(full) = params;
    if (dropout) full.dropout = *dropout;
    void* args[] = {&full, &maps};
    lc.launch(0, {shape.grid[0], grid_y, grid_z}, shape.block, shape.smem_bytes, args);
  };
  if (shape.launches() == 1) return launch(p, shape.grid[1], shape.grid[2]);
  // A slice renumbers its heads and sequences from 0, which the keep mask would see.
  if (dropout)
    throw InvalidArgument(fmt::format("flash_attention (CUDA): dropout_prob: dropout with more than {} heads or {} "
                                      "sequences (one launch) is not supported", shape.grid[1], shape.grid[2]));
  const int64_t head_chunk = shape.grid[1], seq_chunk = shape.grid[2];
  for (int64_t z0 = 0; z0 < shape.sequences; z0 += seq_chunk)
    for (int64_t h0 = 0; h0 < shape.heads_q; h0 += head_chunk) {
      const int64_t nh = std::min(head_chunk, shape.heads_q - h0), nz = std::min(seq_chunk, shape.sequences - z0);
      launch(flash_fwd_slice(p, h0, nh, z0, nz), unsigned(nh), unsigned(nz));
    }
}

// FlashAttentionOp's CUDA hooks live here, with the CUDA build.
engine::OpDef::Workspace FlashAttentionOp::cuda_workspace(const engine::Bound& b, const engine::PlanData& plan) const {
  const FlashKeyFacts& f = plan.facts_as<FlashPlanFacts>().cuda;
  Workspace w;
  // The persistent sm90a blocks' work counter: two u32 (sm90/schedule.cuh, sm90::Drawn).
  if (f.wgmma) w.counter_bytes = 2 * sizeof(u32);
  const FlashFwdParams p = params(b);
  if (b.has(bias)) w.scratch_bytes = bias_copy_bytes(p, launch_facts(f).bias_chunks);
  // The dense mask's tile summary after the bias copy (flash_mask_tiles_cuda.h).
  if (f.dense_mask) w.scratch_bytes = mask_tiles_offset(w.scratch_bytes) + mask_tiles_bytes(p, f.block_q, f.block_k);
  return w;
}

int64_t FlashAttentionOp::cuda_dynamic_smem(const VariantKey& key) const {
  return flash_fwd_smem_bytes(flash_key_facts(schema(), key));
}

void FlashAttentionOp::cuda_launch(const engine::Bound& b, const engine::PlanData& plan,
                                   engine::CudaLaunchContext& lc) const {
  const FlashFwdParams p = params(b);
  const FlashKeyFacts& f = plan.facts_as<FlashPlanFacts>().cuda;
  const DropoutParams d = flash_args::dropout_params(*this, b);
  launch_flash_fwd(lc, flash_fwd_launch_shape(f, p, lc.device().sm_count), p,
                   flash_args::dropout_on(*this, b) ? &d : nullptr);
}

}  // namespace ejk::ops
