// Per-tile pieces of the CUDA flash forward: the variant config, where a block's sequence
// lives, which key tiles it visits, the logit transform + mask (mask.h's functions), the
// online softmax and the final normalisation. Kernel families (sm80, sm90a) share these; they
// differ in how the two matrix products are issued.
//
// Fragment convention (mma m16n8k16 C layout): lane L holds rows L/4 and L/4 + 8 of a 16-row
// tile, columns 2*(L%4) and 2*(L%4)+1 of every 8-column n-tile: element i of a fragment is
// row L/4 + 8*(i/2), column 2*(L%4) + i%2.
#pragma once
#include "ejk/kernels/common/attention_variant.h"
#include "ejk/kernels/common/flash_params.h"
#include "ejk/kernels/common/mask.h"
#include "ejk/kernels/cuda/flash_fwd_traits.cuh"
#include "ejk/kernels/cuda/ptx.cuh"

namespace ejk::cuda {

// The variant's features (common/attention_variant.h, shared with the CPU kernels and the
// reference); per_item is the sm90a schedule.
using FlashFlags = AttentionFlags;

// kRowsPerWarp: 0 takes the geometry's default (what keys build); 16/32 for tuning runs.
template <Elem E, int D, int Br, int Bc, FlashFlags F, int kRowsPerWarp = 0>
struct FlashFwdSm80Config {
  static constexpr FlashFwdSm80Geometry kGeometry{D, Br, Bc, kRowsPerWarp};
  static_assert(E != Elem::f32, "flash_fwd sm80: the CUDA kernels take bf16 or f16 inputs");
  static_assert(kGeometry.valid(),
                "flash_fwd sm80: head_dim must be a multiple of 16 in [16, 256], block_q 64 or "
                "128, block_k a multiple of 16 in [16, 128], shared memory <= 227 KiB");
  static constexpr Elem kElem = E;
  static constexpr int kHeadDim = D, kBlockQ = Br, kBlockK = Bc;
  static constexpr int kThreads = int(kGeometry.threads());
  static constexpr int kStages = int(FlashFwdSm80Geometry::kStages);
  static_assert(kStages >= 2, "the pipeline needs at least a double buffer");
  static constexpr int kMTiles = int(kGeometry.m_tiles_per_warp());  // 16-row tiles per warp
  static constexpr int kNTiles = Bc / 8;                              // 8-key tiles of S
  static constexpr int kDTiles = D / 8;                               // 8-column tiles of O
  static constexpr int kRowPitch = int(kGeometry.row_pitch());
  static constexpr int kQTileElems = int(kGeometry.q_tile_elems());
  static constexpr int kKVTileElems = int(kGeometry.kv_tile_elems());
  static constexpr FlashFlags kFlags = F;
  static constexpr bool kCausal = F.causal, kWindow = F.window, kSoftcap = F.softcap;
  static constexpr bool kSinks = F.sinks, kBias = F.bias, kSegments = F.segments;
  static constexpr bool kRollSinkLoops = false;  // for_each_sink
  static constexpr bool kBiasStaged = false;      // the bias from global memory (pairs)
};

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Where block z's sequence lives. Dense: batch z, positions from 0. Varlen: packed tokens
// [cu[z], cu[z+1]) with no batch stride (b = 0).
struct SeqSpan {
  i64 b;            // batch index for the q/k/v/out/lse strides
  i64 index;        // sequence index for bias and segment ids
  i64 q_begin, len_q, k_begin, len_k;
};

__device__ __forceinline__ SeqSpan sequence_span(const FlashFwdParams& p, i64 z) {
  if (p.cu_seqlens_q != nullptr) {
    const i64 qb = p.cu_seqlens_q[z], kb = p.cu_seqlens_k[z];
    return {0, z, qb, p.cu_seqlens_q[z + 1] - qb, kb, p.cu_seqlens_k[z + 1] - kb};
  }
  return {z, z, 0, p.seqlen_q, 0, p.seqlen_k};
}

// The key tiles a q block of C's shape visits (attention_variant.h's classifier).
template <class C>
__device__ __forceinline__ TileRange key_range(const MaskSpec& m, i64 q0, i64 len_k) {
  return visible_key_tiles<bounded_mask(C::kFlags)>(m, q0, q0 + C::kBlockQ - 1, len_k, C::kBlockK);
}

// Per-thread constants of the rows it owns.
template <class C> struct TileContext {
  i32 q_pos[C::kMTiles][2];  // position of each owned row in its sequence
  i32 q_seg[C::kMTiles][2];  // its segment id (kSegments only; -1 past the sequence end)
  const i32* kv_seg;         // this sequence's kv segment ids, or null (always without kSegments)
  const u16* bias;           // bias of (sequence, head), row 0 (bias variants)
  // C::kBiasStaged: word lane % 4 of the lane's first row in the warp's staged bias boxes
  // (shared memory); its second row bias_half words on; the row's 128-byte swizzle (row % 8).
  // A bias broadcast over its rows has one row: bias_half and bias_swizzle 0.
  const u32* bias_smem;
  int bias_half, bias_swizzle;
  float scale_log2;          // scale * log2(e): plain variants go to log2 units in one multiply
  float inv_cap;
};

template <class C>
__device__ __forceinline__ TileContext<C> tile_context(const FlashFwdParams& p, const SeqSpan& seq,
                                                       i64 h, i64 q0, int warp_row0, int lane) {
  TileContext<C> c;
  const bool segments = C::kSegments && p.q_segment_ids != nullptr;
  c.kv_seg = segments ? p.kv_segment_ids + seq.index * p.kv_seg_stride_b : nullptr;
#pragma unroll
  for (int mt = 0; mt < C::kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const i64 q = q0 + warp_row0 + mt * 16 + (lane >> 2) + half * 8;
      c.q_pos[mt][half] = i32(q);
      if constexpr (C::kSegments)
        c.q_seg[mt][half] = segments && q < seq.len_q
                                ? p.q_segment_ids[seq.index * p.q_seg_stride_b + q]
                                : -1;
    }
  c.bias = C::kBias ? static_cast<const u16*>(p.bias) + seq.index * p.bias_stride_b +
                          h * p.bias_stride_h
                    : nullptr;
  c.bias_smem = nullptr;  // set by the kernels that stage the bias
  c.bias_half = c.bias_swizzle = 0;
  c.scale_log2 = p.scale * kLog2e;
  c.inv_cap = C::kSoftcap ? 1.f / p.softcap : 0.f;
  return c;
}

// True unless every (row, key) pair of the tile is visible by position and inside the
// sequence: most tiles skip the per-element mask. Segment ids are mask_segments' own test.
template <class C>
__device__ __forceinline__ bool tile_needs_mask(const MaskSpec& m, i64 q0, i64 k0, i64 len_k) {
  if (k0 + C::kBlockK > len_k) return true;
  return !tile_fully_visible<bounded_mask(C::kFlags)>(m, q0, q0 + C::kBlockQ - 1, k0,
                                                      k0 + C::kBlockK - 1);
}

// Turns raw dot products into log2-unit logits (mask.h's transform) without masking, or with
// kLog2 false into logits in natural units (one multiply less per score: the sm90a softmax
// takes log2(e) into its exponent's FFMA, softmax_deferred's exp_scale). Every tile runs this,
// masked tiles then mask_logits: one copy of the transform in the kernel (compiled into a
// masked and an unmasked path it doubled the code, and the NVRTC time with it;
// docs/design/flash_fwd_cuda.md, "NVRTC compile time"). Element (nt, i) of a fragment row is
// key k0 + 2 * (lane % 4) + nt * 8 + (i & 1).
//
// The bias of a fragment row's two keys k0 + 8 nt + lane_col, + 1 is one 4-byte load: the CUDA
// kernels take a bias whose base is 4-byte aligned and whose strides and key extent are even
// (FlashFwdParams::bias; the backend copies any other into such rows). A 2-byte load per key
// touched the cache lines of 8 rows for 64 bytes: those L1 wavefronts, not DRAM, bounded the bias
// kernels (2.4-6x slower than the plain ones; 4-byte loads 1.3-2.0x faster;
// docs/design/flash_fwd_cuda.md, "Bias"). Reads stay inside each sequence's rows: rows past len_q
// read row len_q - 1, and a lane reads no pair past the one of key len_k - 1 (k0 < len_k for
// every visited tile), whose second key is at most key len_k, inside the even key extent. The
// logits of rows past len_q are never stored. Kernels that stage the bias (C::kBiasStaged: sm90a,
// where shared memory allows) read the same pairs from the warp's TMA boxes in shared memory
// (sm90_stage_bias): chunk nt (16 bytes) of row r at box nt / 8, row r, 16-byte slot (nt % 8) ^
// (r % 8) (the 128-byte swizzle); the lanes' rows r = lane / 4 then put a warp's 4-byte reads in
// 32 distinct banks.
template <class C, bool kLog2 = true>
__device__ __forceinline__ void logits_to_log2(float (&s)[C::kMTiles][C::kNTiles][4],
                                               const FlashFwdParams& p, const TileContext<C>& c,
                                               const SeqSpan& seq, i64 k0, int lane) {
  auto tanh_fn = [](float v) { return fast_tanh(v); };
  // How far (in words past its first) a lane may read: to the pair of key min(len_k - 1, the
  // tile's last). A predicate per load, not a clamped index: clamped indices cost an address
  // per load and spilled at three consumers.
  const int words_left = (int(min_of<i64>(seq.len_k - 1 - k0, C::kBlockK - 1)) >> 1) - (lane & 3);
  constexpr int kBoxWords = int(FlashFwdSm90Geometry::kBiasBoxBytes / 4);
#pragma unroll
  for (int mt = 0; mt < C::kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const u16* bias_row =
          C::kBias && !C::kBiasStaged ? c.bias + min_of<i64>(c.q_pos[mt][half], seq.len_q - 1) * p.bias_stride_q
                   : nullptr;
      const u32* bias_words =
          C::kBias && !C::kBiasStaged ? reinterpret_cast<const u32*>(bias_row + k0) + (lane & 3) : nullptr;
      // The next tile's keys of this row into L2 (each lane of the quad one of the row's <= 4
      // lines): its loads, a tile from now, then wait for L2 instead of DRAM.
      if (C::kBias && !C::kBiasStaged && k0 + C::kBlockK < seq.len_k)
        prefetch_l2(bias_row + min_of<i64>(k0 + C::kBlockK + min_of(64 * (lane & 3), C::kBlockK - 1),
                                           seq.len_k - 1));
#pragma unroll
      for (int nt = 0; nt < C::kNTiles; ++nt) {
        u32 pair = 0;  // keys past len_k: masked to -inf whatever their bias
        if constexpr (C::kBiasStaged)  // chunk nt's slot (sm90_stage_bias)
          pair = c.bias_smem[half * c.bias_half + (nt >> 3) * kBoxWords +
                             (((nt & 7) ^ c.bias_swizzle) << 2)];
        else if (C::kBias && nt * 4 <= words_left)
          pair = bias_words[nt * 4];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          float& v = s[mt][nt][2 * half + j];
          if (!C::kBias && !C::kSoftcap) {
            v *= kLog2 ? c.scale_log2 : p.scale;
          } else {
            const float bias = C::kBias ? to_f32<C::kElem>(u16(pair >> (16 * j))) : 0.f;
            v = transform_logit<C::kBias, C::kSoftcap>(v * p.scale, bias, p.softcap, c.inv_cap,
                                                       tanh_fn);
            if (kLog2) v *= kLog2e;
          }
        }
      }
    }
}

// Sets the logits of invisible (row, key) pairs to -inf: mask.h's window / causal bounds and
// the sequence end. Only tiles for which tile_needs_mask holds.
//
// Per row, the visible keys are one interval: as columns relative to the thread's first key
// kb, [lo, hi], clamped to [-1, block_k] so that they fit an int; per element that is two
// compares with the element's compile-time column (one without a window: lo <= 0).
template <class C>
__device__ __forceinline__ void mask_logits(float (&s)[C::kMTiles][C::kNTiles][4],
                                            const TileContext<C>& c, const MaskSpec& m,
                                            const SeqSpan& seq, i64 k0, int lane) {
  const int lane_col = (lane & 3) * 2;
  const i64 kb = k0 + lane_col;
  auto clamp = [](i64 v) { return int(min_of<i64>(max_of<i64>(v, -1), C::kBlockK)); };
#pragma unroll
  for (int mt = 0; mt < C::kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const i64 q = c.q_pos[mt][half];
      const int lo = C::kWindow ? clamp(first_visible_key(q, m) - kb) : 0;
      const int hi = clamp(min_of<i64>(last_visible_key(q, m), seq.len_k - 1) - kb);
#pragma unroll
      for (int nt = 0; nt < C::kNTiles; ++nt)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int col = nt * 8 + j;
          if (col < lo || col > hi) s[mt][nt][2 * half + j] = neg_inf_f32();
        }
    }
}

// Sets the logits of pairs in different segments (or of rows without one) to -inf: variants
// with the segments flag, every tile, a no-op when the ids are absent at run time. The whole
// warp runs it (it depends on the block's tile only).
// A lane needs the ids of its 2 kNTiles keys (k0 + 8 nt + lane_col + j); the warp loads each key
// once (lane 4 u + t: keys 64 v + 8 u + 2 t + j, four loads at block_k 128) and the lanes read
// theirs by shuffle. One load per key and lane was 32 loads with an index clamp each, ~0.3 s of
// a d128 causal key's NVRTC time (two thirds of it in ptxas); the shuffles and the exit below
// made the segments kernels 1.3-2.1x faster (docs/design/flash_fwd_cuda.md, "Masks and
// segment ids"). Indices are clamped into the sequence (k0 < len_k), so the loads need no
// branch; keys past the end are -inf already (mask_logits).
template <class C>
__device__ __forceinline__ void mask_segments(float (&s)[C::kMTiles][C::kNTiles][4],
                                              const TileContext<C>& c, const SeqSpan& seq, i64 k0,
                                              int lane) {
  if (c.kv_seg == nullptr) return;
  const i32* seg = c.kv_seg + k0;
  const int k_last = int(min_of<i64>(seq.len_k - 1 - k0, C::kBlockK - 1));
  constexpr int kGroups = (C::kNTiles + 7) / 8;  // 64-key groups
  const int u = lane >> 2, t = lane & 3;
  i32 own[kGroups][2];
#pragma unroll
  for (int v = 0; v < kGroups; ++v)
#pragma unroll
    for (int j = 0; j < 2; ++j) own[v][j] = seg[min_of(64 * v + 8 * u + 2 * t + j, k_last)];
  // The warp's rows and the tile's keys all in one segment: nothing to mask. Packed sequences'
  // segments span many tiles, so most tiles end here.
  const i32 first = __shfl_sync(0xffffffffu, own[0][0], 0);
  bool same = first >= 0;
#pragma unroll
  for (int v = 0; v < kGroups; ++v) same = same && own[v][0] == first && own[v][1] == first;
#pragma unroll
  for (int mt = 0; mt < C::kMTiles; ++mt)
    same = same && c.q_seg[mt][0] == first && c.q_seg[mt][1] == first;
  if (__all_sync(0xffffffffu, same)) return;
#pragma unroll
  for (int nt = 0; nt < C::kNTiles; ++nt)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const i32 k_seg = __shfl_sync(0xffffffffu, own[nt / 8][j], 4 * (nt % 8) + t);
#pragma unroll
      for (int mt = 0; mt < C::kMTiles; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half)
          if (!segment_visible(c.q_seg[mt][half], k_seg)) s[mt][nt][2 * half + j] = neg_inf_f32();
    }
}

// Online softmax state of one row (per lane: its partial of the row sum).
struct RowState {
  float m;          // reference max the probabilities are taken against, log2 units; -inf
                    // while nothing is visible (sm90: may lag the row max, see softmax_deferred)
  float top;        // the row max seen so far (log2 units)
  float l;          // this lane's share of sum exp2(x - m)
  float out_scale;  // epilogue: multiplier of the O accumulator
  float lse;        // epilogue: natural-log lse
};

template <class C> __device__ __forceinline__ void init_rows(RowState (&rows)[C::kMTiles][2]) {
#pragma unroll
  for (int mt = 0; mt < C::kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) rows[mt][half] = {neg_inf_f32(), neg_inf_f32(), 0.f, 0.f, 0.f};
}

// s: log2 logits in, probabilities (relative to the new max) out; O rescaled to that max.
template <class C>
__device__ __forceinline__ void online_softmax(float (&s)[C::kMTiles][C::kNTiles][4],
                                               float (&o)[C::kMTiles][C::kDTiles][4],
                                               RowState (&rows)[C::kMTiles][2]) {
#pragma unroll
  for (int mt = 0; mt < C::kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float mx = neg_inf_f32();
#pragma unroll
      for (int nt = 0; nt < C::kNTiles; ++nt)
        mx = fmax_f32(mx, fmax_f32(s[mt][nt][2 * half], s[mt][nt][2 * half + 1]));
      mx = quad_max(mx);
      RowState& r = rows[mt][half];
      const float m_new = fmax_f32(r.m, mx);
      // A row that has seen nothing keeps max -inf; subtracting 0 then maps -inf to p = 0
      // instead of exp2(-inf - -inf) = NaN.
      const float m_use = m_new == neg_inf_f32() ? 0.f : m_new;
      const float alpha = fast_exp2(r.m - m_use);
      r.m = r.top = m_new;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < C::kNTiles; ++nt)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float pj = fast_exp2(s[mt][nt][2 * half + j] - m_use);
          s[mt][nt][2 * half + j] = pj;
          sum += pj;
        }
      r.l = r.l * alpha + sum;
#pragma unroll
      for (int dt = 0; dt < C::kDTiles; ++dt) {
        o[mt][dt][2 * half] *= alpha;
        o[mt][dt][2 * half + 1] *= alpha;
      }
    }
}

// f(i) for each of n sinks (once per item and row). The sm_90a family rolls the loop: NVVM's 4x
// unroll + remainder of finish_rows' four sink loops was ~15% of a sinks key's code there
// (NVRTC time); the sm_80 family's sinks kernels took 10-16 more registers rolled.
template <class C, class F> __device__ __forceinline__ void for_each_sink(i64 n, F&& f) {
  if constexpr (C::kRollSinkLoops) {
#pragma unroll 1
    for (int i = 0; i < int(n); ++i) f(i);
  } else {
    for (i64 i = 0; i < n; ++i) f(i);
  }
}

// Folds in the sinks (they join the max and the denominator, carry no value) and moves the
// sum from the reference max to the row max (they differ where softmax_deferred let the
// reference lag), then sets the O multiplier and the lse. No visible key and no sink: out 0,
// lse -inf.
template <class C>
__device__ __forceinline__ void finish_rows(RowState (&rows)[C::kMTiles][2],
                                            const FlashFwdParams& p, i64 h) {
#pragma unroll
  for (int mt = 0; mt < C::kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      RowState& r = rows[mt][half];
      float l = quad_sum(r.l), m_fin = r.top;
      const float* aux = p.softmax_aux + h * p.sinks_stride_h;
      if (C::kSinks)
        for_each_sink<C>(p.num_sinks, [&](i64 i) { m_fin = max_of(m_fin, aux[i] * kLog2e); });
      const float m_use = m_fin == neg_inf_f32() ? 0.f : m_fin;
      const float factor = fast_exp2(r.m - m_use);  // 1 when nothing lagged and no sink is above
      l *= factor;
      if (C::kSinks)
        for_each_sink<C>(p.num_sinks, [&](i64 i) { l += fast_exp2(aux[i] * kLog2e - m_use); });
      const bool any = l > 0.f;
      r.out_scale = any ? (p.normalize_output ? factor * fast_rcp(l) : factor) : 0.f;
      r.lse = any ? (m_fin + fast_log2(l)) * kLn2 : neg_inf_f32();
    }
}

template <class C>
__device__ __forceinline__ void write_lse(const RowState (&rows)[C::kMTiles][2],
                                          const FlashFwdParams& p, const SeqSpan& seq, i64 h,
                                          i64 q0, int warp_row0, int lane) {
  if ((lane & 3) != 0) return;  // the 4 lanes of a quad agree; one writes
#pragma unroll
  for (int mt = 0; mt < C::kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const i64 q = q0 + warp_row0 + mt * 16 + (lane >> 2) + half * 8;
      if (q < seq.len_q)
        p.lse[seq.b * p.lse_stride_b + h * p.lse_stride_h + seq.q_begin + q] = rows[mt][half].lse;
    }
}

}  // namespace ejk::cuda
