// Arguments of the flash attention forward kernels, shared by every backend.
// Plain data: the runtime fills it after validating shapes; kernels trust it.
// Strides are in elements; the head_dim axis of q, k, v and out is contiguous (stride 1).
#pragma once
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/mask.h"
#include "ejk/kernels/common/philox.h"

namespace ejk {

struct FlashFwdParams {
  // Element type of q, k, v, out and bias is the variant's dtype.
  const void* q;    // [B, Sq, Hq, D]   varlen: [total_q, Hq, D] (batch stride unused)
  const void* k;    // [B, Sk, Hkv, D]  varlen: [total_k, Hkv, D]
  const void* v;    // [B, Sk, Hkv, D]
  void* out;        // [B, Sq, Hq, D]
  float* lse;       // [B, Hq, Sq] float32; varlen: [1, Hq, total_q]

  // [B|1, Hq|1, Sq|1, Sk] (bias variants), stride 0 broadcasts. The CUDA kernels read it by TMA
  // boxes (sm90a keys that stage it in shared memory: a 16-byte aligned base and strides that
  // are multiples of 8) or as 4-byte pairs of keys (the others: a 4-byte aligned base, even
  // strides and an even Sk); the backend copies any other bias into such rows first
  // (FlashFwdLaunchFacts::bias_chunks says which a key takes).
  const void* bias;
  const i32* q_segment_ids;    // [B, Sq] or null
  const i32* kv_segment_ids;   // [B, Sk] or null (both or neither)
  const i32* cu_seqlens_q;     // [batch + 1] or null: varlen mode when set
  const i32* cu_seqlens_k;     // [batch + 1], set together with cu_seqlens_q
  const float* softmax_aux;    // [Hq, num_sinks] or [num_sinks] float32 (sink variants)
  // [B|1, Hq|1, Sq, Sk] bytes, nonzero = visible (mask.h; dense-mask variants), stride 0
  // broadcasts, keys contiguous; null otherwise.
  const u8* dense_mask;
  // CUDA: the mask's class per (mask plane, q tile, k tile) of the kernel's tiles, computed on
  // the device before the kernel (cuda/flash_mask_tiles.cuh); null elsewhere.
  const u8* mask_tiles;

  i64 batch;                   // varlen: number of packed sequences
  i64 seqlen_q, seqlen_k;      // varlen: the longest sequence of each
  i64 total_q, total_k;        // varlen: rows of the packed q and k/v tensors; dense: unused
  i64 heads_q, heads_kv, head_dim;
  i64 num_sinks;
  i64 sinks_stride_h;          // softmax_aux of head h at h * sinks_stride_h (0: shared by all)

  i64 q_stride_b, q_stride_s, q_stride_h;
  i64 k_stride_b, k_stride_s, k_stride_h;
  i64 v_stride_b, v_stride_s, v_stride_h;
  i64 o_stride_b, o_stride_s, o_stride_h;
  i64 lse_stride_b, lse_stride_h;  // lse[b * lse_stride_b + h * lse_stride_h + s]
  i64 bias_stride_b, bias_stride_h, bias_stride_q;  // key axis contiguous
  i64 q_seg_stride_b, kv_seg_stride_b;
  i64 mask_stride_b, mask_stride_h, mask_stride_q;

  float scale;                 // applied to dot(q, k)
  float softcap;               // cap of softcap variants (> 0)
  MaskSpec mask;               // causal bit mirrors the variant; window bounds used by window variants
  i32 normalize_output;        // 0: out is not divided by the softmax denominator
  // sm90a persistent causal order: K/V bytes a group of heads may keep live in L2
  // (flash_fwd_sm90_schedule.cuh sm90_causal_order); 0 for the kernel's default. Changes only the
  // order of work, never the result.
  i64 l2_kv_bytes;
  // sm90a persistent causal blocks with item records draw their work items from this counter
  // (sm90/schedule.cuh, sm90::Drawn): two u32 of device memory, zero before a stream's
  // first launch; every launch leaves them zero again. One per stream: launches that overlap
  // must not share it. Null: the static order. Changes only the order of work.
  u32* tile_counter;
};

// The params of dropout variants (philox.h's WithDropout); their kernels read the tail through
// flash_dropout. A CUDA entry point's parameter type: FlashFwdArgs<key's dropout flag>.
using FlashFwdDropoutParams = WithDropout<FlashFwdParams>;
EJK_HD const DropoutParams& flash_dropout(const FlashFwdParams& p) {
  return static_cast<const FlashFwdDropoutParams&>(p).dropout;
}
template <bool kDropout> using FlashFwdArgs = DropoutArgs<FlashFwdParams, kDropout>;

// Row q of head h in sequence b of the dense mask (keys from 0).
EJK_HD const u8* flash_mask_row(const FlashFwdParams& p, i64 b, i64 h, i64 q) {
  return p.dense_mask + b * p.mask_stride_b + h * p.mask_stride_h + q * p.mask_stride_q;
}

// A tile's class in FlashFwdParams::mask_tiles: no pair, some pairs or every pair inside the
// sequences visible by the dense mask.
enum : u8 { kMaskTileHidden = 0, kMaskTilePartial = 1, kMaskTileVisible = 2 };

// Threads of the summary kernel's blocks (one block per tile).
inline constexpr unsigned kMaskTilesThreads = 128;

// The dense mask's tile summary: planes (1 along a broadcast dim) of q_tiles x k_tiles classes.
struct FlashMaskTiles {
  const u8* mask;  // as FlashFwdParams::dense_mask, with its strides
  u8* tiles;       // [batches, heads, q_tiles, k_tiles]
  i64 stride_b, stride_h, stride_q;
  i64 batches, heads;  // the mask's planes: B or 1, Hq or 1
  i64 rows, keys;      // seqlen_q, seqlen_k
  i64 block_q, block_k, q_tiles, k_tiles;
};

EJK_HD FlashMaskTiles flash_mask_tiles_of(const FlashFwdParams& p, i64 block_q, i64 block_k) {
  return {p.dense_mask, nullptr, p.mask_stride_b, p.mask_stride_h, p.mask_stride_q,
          p.mask_stride_b != 0 ? p.batch : 1, p.mask_stride_h != 0 ? p.heads_q : 1, p.seqlen_q, p.seqlen_k,
          block_q, block_k, ceil_div(p.seqlen_q, block_q), ceil_div(p.seqlen_k, block_k)};
}

// The class of tile (q_tile, k_tile) of (batch b, head h) in p.mask_tiles, of block_q x block_k tiles.
EJK_HD u8 flash_mask_tile(const FlashFwdParams& p, i64 b, i64 h, i64 q_tile, i64 k_tile, i64 block_q,
                          i64 block_k) {
  const i64 nq = ceil_div(p.seqlen_q, block_q), nk = ceil_div(p.seqlen_k, block_k);
  const i64 heads = p.mask_stride_h != 0 ? p.heads_q : 1;
  const i64 plane = (p.mask_stride_b != 0 ? b : 0) * heads + (p.mask_stride_h != 0 ? h : 0);
  return p.mask_tiles[(plane * nq + q_tile) * nk + k_tile];
}

// The planes and rows a bias [B|1, Hq|1, Sq|1, Sk] holds: 1 along each broadcast (stride 0)
// axis; rows are positions in a sequence (varlen: the longest's).
struct FlashFwdBiasExtent {
  i64 batches, heads, rows;
};
EJK_HD FlashFwdBiasExtent flash_fwd_bias_extent(const FlashFwdParams& p) {
  return {p.bias_stride_b != 0 ? p.batch : 1, p.bias_stride_h != 0 ? p.heads_q : 1,
          p.bias_stride_q != 0 ? p.seqlen_q : 1};
}

// The CUDA runtime's copy of a bias its kernel cannot read in place (FlashFwdParams::bias;
// kernels/ejk/kernels/cuda/flash_fwd_bias_rows.cuh): rows of any 2-byte alignment and stride
// into rows of `pitch` keys (a multiple of 8) at a 16-byte aligned base, keys past the row zero.
struct FlashFwdBiasRows {
  const u16* src;   // row r of plane (b, h) at b * stride_b + h * stride_h + r * stride_q
  u16* dst;         // row r of plane (b, h) at ((b * heads + h) * rows + r) * pitch
  i64 stride_b, stride_h, stride_q;
  i64 batches;      // batch, or 1 for a bias broadcast over the batch
  i64 heads;        // heads_q, or 1 for a bias broadcast over heads
  i64 rows;         // seqlen_q, or 1 for a bias broadcast over queries
  i64 keys, pitch;  // pitch = flash_fwd_bias_pitch(keys)
};

// The copy's row pitch: whole 16-byte chunks of 8 keys (it writes every chunk of a row in full).
EJK_HD i64 flash_fwd_bias_pitch(i64 keys) { return ceil_div(keys, i64(8)) * 8; }

// Work decomposition shared by the runtime and the CPU kernels: one task is one
// (sequence, q head, block of block_q queries). Tasks past a sequence's end are empty.
EJK_HD i64 flash_fwd_num_tasks(const FlashFwdParams& p, i64 block_q) {
  return p.batch * p.heads_q * ceil_div(p.seqlen_q, block_q);
}

}  // namespace ejk
