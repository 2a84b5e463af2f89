// A freestanding fp32 attention forward kernel for the CPU JIT tests. It is shaped like a
// generated variant (a Config template, FlashFwdParams, the shared mask semantics, libm calls
// that resolve against the process) but it is not the production kernel, which lives in
// kernels/ejk/kernels/cpu/flash_fwd.h. Compiled only by the JIT, never by the host compiler.
#pragma once
#include "ejk/kernels/common/flash_params.h"

namespace ejk::jit_sample {

template <int kHeadDim_, int kBlockQ_, int kBlockK_, bool kCausal_>
struct Config {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockQ = kBlockQ_;
  static constexpr int kBlockK = kBlockK_;
  static constexpr bool kCausal = kCausal_;
  static_assert(kHeadDim > 0 && kHeadDim % 8 == 0 && kHeadDim <= 256, "head_dim: 8..256, /8");
  static_assert(kBlockQ > 0 && kBlockQ <= 128 && kBlockK > 0 && kBlockK <= 256, "block sizes");
};

// Working set of one task; lives on the stack (at most ~200 KB for the largest config).
template <class C>
struct Tile {
  float q[C::kBlockQ][C::kHeadDim];    // queries, pre-multiplied by the scale
  float acc[C::kBlockQ][C::kHeadDim];  // sum of exp(s - row_max) * v, not yet divided
  float s[C::kBlockQ][C::kBlockK];     // logits of the current key block; -inf when masked
  float row_max[C::kBlockQ];
  float row_sum[C::kBlockQ];
};

struct TaskCoords {
  i64 batch, head, q_begin, rows;
};

// Task order: query blocks fastest, then heads, then sequences.
template <class C>
EJK_HD TaskCoords task_coords(const FlashFwdParams& p, i64 task) {
  i64 q_blocks = ceil_div(p.seqlen_q, static_cast<i64>(C::kBlockQ));
  i64 q_block = task % q_blocks;
  i64 batch_head = task / q_blocks;
  i64 q_begin = q_block * C::kBlockQ;
  return {batch_head / p.heads_q, batch_head % p.heads_q, q_begin,
          min_of(static_cast<i64>(C::kBlockQ), p.seqlen_q - q_begin)};
}

template <class C>
EJK_HD void load_queries(const FlashFwdParams& p, const TaskCoords& t, Tile<C>& tile) {
  const float* q = static_cast<const float*>(p.q) + t.batch * p.q_stride_b + t.head * p.q_stride_h;
  for (i64 i = 0; i < t.rows; ++i) {
    const float* row = q + (t.q_begin + i) * p.q_stride_s;
    for (int d = 0; d < C::kHeadDim; ++d) tile.q[i][d] = row[d] * p.scale;
  }
  for (i64 i = 0; i < C::kBlockQ; ++i) {
    for (int d = 0; d < C::kHeadDim; ++d) tile.acc[i][d] = 0.0f;
    tile.row_max[i] = neg_inf_f32();
    tile.row_sum[i] = 0.0f;
  }
}

// Logits of rows x [k_begin, k_begin + cols), masked ones set to -inf.
template <class C>
EJK_HD void block_logits(const FlashFwdParams& p, const TaskCoords& t, const MaskSpec& mask,
                         const float* k, i64 k_begin, i64 cols, Tile<C>& tile) {
  for (i64 i = 0; i < t.rows; ++i) {
    for (i64 j = 0; j < cols; ++j) {
      const float* key = k + (k_begin + j) * p.k_stride_s;
      float dot = 0.0f;
      for (int d = 0; d < C::kHeadDim; ++d) dot += tile.q[i][d] * key[d];
      bool visible = position_visible(t.q_begin + i, k_begin + j, mask);
      tile.s[i][j] = visible ? dot : neg_inf_f32();
    }
  }
}

// Online softmax: rescale what was accumulated so far to the new row max, then add this block.
template <class C>
EJK_HD void accumulate_block(const FlashFwdParams& p, const TaskCoords& t, const float* v,
                             i64 k_begin, i64 cols, Tile<C>& tile) {
  for (i64 i = 0; i < t.rows; ++i) {
    float block_max = neg_inf_f32();
    for (i64 j = 0; j < cols; ++j) block_max = max_of(block_max, tile.s[i][j]);
    if (block_max == neg_inf_f32()) continue;  // nothing visible in this block
    float new_max = max_of(tile.row_max[i], block_max);
    float correction = __builtin_expf(tile.row_max[i] - new_max);  // exp(-inf) = 0 at start
    tile.row_sum[i] *= correction;
    for (int d = 0; d < C::kHeadDim; ++d) tile.acc[i][d] *= correction;
    for (i64 j = 0; j < cols; ++j) {
      float weight = __builtin_expf(tile.s[i][j] - new_max);
      tile.row_sum[i] += weight;
      const float* value = v + (k_begin + j) * p.v_stride_s;
      for (int d = 0; d < C::kHeadDim; ++d) tile.acc[i][d] += weight * value[d];
    }
    tile.row_max[i] = new_max;
  }
}

template <class C>
EJK_HD void store_rows(const FlashFwdParams& p, const TaskCoords& t, const Tile<C>& tile) {
  float* out = static_cast<float*>(p.out) + t.batch * p.o_stride_b + t.head * p.o_stride_h;
  float* lse = p.lse + t.batch * p.lse_stride_b + t.head * p.lse_stride_h;
  for (i64 i = 0; i < t.rows; ++i) {
    float* row = out + (t.q_begin + i) * p.o_stride_s;
    bool empty = tile.row_sum[i] == 0.0f;  // no visible key: out = 0, lse = -inf
    float inv = empty ? 0.0f : (p.normalize_output ? 1.0f / tile.row_sum[i] : 1.0f);
    for (int d = 0; d < C::kHeadDim; ++d) row[d] = tile.acc[i][d] * inv;
    lse[t.q_begin + i] =
        empty ? neg_inf_f32() : tile.row_max[i] + __builtin_logf(tile.row_sum[i]);
  }
}

template <class C>
EJK_HD void attention_task(const FlashFwdParams& p, i64 task) {
  TaskCoords t = task_coords<C>(p, task);
  if (t.rows <= 0) return;
  MaskSpec mask = p.mask;
  mask.causal = C::kCausal;
  i64 head_kv = t.head / (p.heads_q / p.heads_kv);
  const float* k = static_cast<const float*>(p.k) + t.batch * p.k_stride_b + head_kv * p.k_stride_h;
  const float* v = static_cast<const float*>(p.v) + t.batch * p.v_stride_b + head_kv * p.v_stride_h;
  // Only key blocks some row of this query block can see.
  i64 k_lo = max_of(first_visible_key(t.q_begin, mask), static_cast<i64>(0));
  i64 k_hi = min_of(last_visible_key(t.q_begin + t.rows - 1, mask), p.seqlen_k - 1);

  Tile<C> tile;
  load_queries<C>(p, t, tile);
  for (i64 k_begin = k_lo; k_begin <= k_hi; k_begin += C::kBlockK) {
    i64 cols = min_of(static_cast<i64>(C::kBlockK), k_hi + 1 - k_begin);
    block_logits<C>(p, t, mask, k, k_begin, cols, tile);
    accumulate_block<C>(p, t, v, k_begin, cols, tile);
  }
  store_rows<C>(p, t, tile);
}

template <class C>
EJK_HD void attention_tasks(const FlashFwdParams& p, i64 task_begin, i64 task_end) {
  for (i64 task = task_begin; task < task_end; ++task) attention_task<C>(p, task);
}

}  // namespace ejk::jit_sample
