// Arguments of native sparse attention's selection kernels, shared by every backend and the
// reference. Plain data: the runtime fills it after validating shapes; kernels trust it.
//
// The math: token t of query head h (kv head hk = h / (heads_q / heads_kv)) attends in one
// softmax to key j when j <= t and j lies in a block c = j / block_size that one of the first
// count slots of block_indices[b, t, hk, :] names, count = clamp(block_counts[b, t, hk], 0,
// slots) (slots without block_counts). A slot naming a negative block or one past t's own is
// empty; a block named twice is attended once. lse is the natural log-sum-exp of the logits
// scale * q.k, -inf (and out 0) for a token with no key.
#pragma once
#include "ejk/kernels/common/base.h"

namespace ejk {

struct NsaParams {
  const void *q, *k, *v;
  void* out;
  float* lse;
  const i32* block_indices;
  const i32* block_counts;  // null: every slot counts
  // Element strides; the head dim is contiguous.
  i64 q_stride_b, q_stride_t, q_stride_h;
  i64 k_stride_b, k_stride_t, k_stride_h;
  i64 v_stride_b, v_stride_t, v_stride_h;
  i64 o_stride_b, o_stride_t, o_stride_h;
  i64 lse_stride_b, lse_stride_t, lse_stride_h;
  i64 bi_stride_b, bi_stride_t, bi_stride_h, bi_stride_s;
  i64 bc_stride_b, bc_stride_t, bc_stride_h;
  i64 batch, seqlen, heads_q, heads_kv, head_dim, slots, block_size;
  float scale;
  // The backward's: d_out and d_lse (null: zeros) in, dq, dk, dv out (q's, k's and v's shapes).
  const void* d_out;
  i64 do_stride_b, do_stride_t, do_stride_h;
  const float* d_lse;
  i64 dl_stride_b, dl_stride_t, dl_stride_h;
  void *dq, *dk, *dv;
  i64 dq_stride_b, dq_stride_t, dq_stride_h;
  i64 dk_stride_b, dk_stride_t, dk_stride_h;
  i64 dv_stride_b, dv_stride_t, dv_stride_h;
};

// Query heads per row task and keys per tile of the CPU kernels (a task's stack arrays).
inline constexpr i64 kNsaRowHeads = 16;
inline constexpr i64 kNsaKeyTile = 64;

// The CUDA forward: one warp per row task; its shared memory holds Q [16][D] and the K and V
// tiles [kNsaKeyTile][D], 16-bit.
inline constexpr int kNsaWarpThreads = 32;
EJK_HD constexpr i64 nsa_fwd_smem(i64 head_dim) { return (16 + 2 * kNsaKeyTile) * head_dim * 2; }

// The CUDA backward: one kernel, launched twice in stream order (phase). kNsaBwdDq runs a warp
// per row task and also writes each row's delta = d_out . out - d_lse into `delta` ([B][T][Hq]
// f32, the call's workspace); kNsaBwdKv runs 4 warps (16 keys each) per key task and reads it.
enum NsaBwdPhase : int { kNsaBwdDq = 0, kNsaBwdKv = 1 };
struct NsaBwdCudaParams {
  NsaParams p;
  float* delta;
  int phase;
};
inline constexpr int kNsaBwdKvThreads = 128;
static_assert(kNsaBwdKvThreads / 32 * 16 == kNsaKeyTile, "a warp per 16 keys of a key tile");
// dq: Q and dO [16][D], the K and V tiles [kNsaKeyTile][D], 16-bit.
EJK_HD constexpr i64 nsa_bwd_dq_smem(i64 head_dim) { return (32 + 2 * kNsaKeyTile) * head_dim * 2; }
// dk/dv: the same 16-bit rows, then the scan's token offsets, its per-warp counts and the
// batch's tokens, heads, lse and delta (4 bytes each).
EJK_HD constexpr i64 nsa_bwd_kv_smem(i64 head_dim) {
  return (32 + 2 * kNsaKeyTile) * head_dim * 2 + 4 * (kNsaBwdKvThreads + kNsaBwdKvThreads / 32 + 4 * 16);
}
EJK_HD constexpr i64 nsa_bwd_cuda_smem(i64 head_dim) { return nsa_bwd_kv_smem(head_dim); }

EJK_HD i64 nsa_count(const NsaParams& p, i64 b, i64 t, i64 hk) {
  if (!p.block_counts) return p.slots;
  const i64 c = p.block_counts[b * p.bc_stride_b + t * p.bc_stride_t + hk * p.bc_stride_h];
  return c < 0 ? 0 : (c > p.slots ? p.slots : c);
}

EJK_HD i64 nsa_slot(const NsaParams& p, i64 b, i64 t, i64 hk, i64 s) {
  return p.block_indices[b * p.bi_stride_b + t * p.bi_stride_t + hk * p.bi_stride_h + s * p.bi_stride_s];
}

// The block slot s of token t names, or -1 when the slot is empty, names a block past t's own,
// or repeats a block an earlier counted slot named (each block is attended once).
EJK_HD i64 nsa_selected_block(const NsaParams& p, i64 b, i64 t, i64 hk, i64 s) {
  const i64 c = nsa_slot(p, b, t, hk, s);
  if (c < 0 || c > t / p.block_size) return -1;
  for (i64 e = 0; e < s; ++e)
    if (nsa_slot(p, b, t, hk, e) == c) return -1;
  return c;
}

// Whether token t's kv group selects block c (c <= t / block_size is the caller's).
EJK_HD bool nsa_selects(const NsaParams& p, i64 b, i64 t, i64 hk, i64 c) {
  const i64 n = nsa_count(p, b, t, hk);
  for (i64 s = 0; s < n; ++s)
    if (nsa_slot(p, b, t, hk, s) == c) return true;
  return false;
}

EJK_HD i64 nsa_row_tasks(const NsaParams& p) {
  return p.batch * p.seqlen * p.heads_kv * ceil_div(p.heads_q / p.heads_kv, kNsaRowHeads);
}

// A row task's place: sequence, token, kv head and its query heads [h0, h0 + rows); task
// indexes [0, nsa_row_tasks(p)), the head chunk fastest (every backend's dq/forward order).
struct NsaRowTask {
  i64 b, t, hk, h0;
  int rows;
};

EJK_HD NsaRowTask nsa_row_task(const NsaParams& p, i64 task) {
  const i64 group = p.heads_q / p.heads_kv, chunks = ceil_div(group, kNsaRowHeads);
  NsaRowTask r;
  const i64 c = task % chunks;
  task /= chunks;
  r.hk = task % p.heads_kv;
  task /= p.heads_kv;
  r.t = task % p.seqlen;
  r.b = task / p.seqlen;
  r.h0 = r.hk * group + c * kNsaRowHeads;
  r.rows = int(min_of(kNsaRowHeads, group - c * kNsaRowHeads));
  return r;
}

// Calls visit(k0, n) for each tile of keys token t attends to: its selected blocks in slot
// order, each clipped to keys <= t and cut into tiles of at most kNsaKeyTile.
template <class Visit> EJK_HD void nsa_for_each_tile(const NsaParams& p, const NsaRowTask& r, Visit&& visit) {
  const i64 n = nsa_count(p, r.b, r.t, r.hk);
  for (i64 s = 0; s < n; ++s) {
    const i64 c = nsa_selected_block(p, r.b, r.t, r.hk, s);
    if (c < 0) continue;
    const i64 hi = min_of((c + 1) * p.block_size, r.t + 1);
    for (i64 k0 = c * p.block_size; k0 < hi; k0 += kNsaKeyTile) visit(k0, int(min_of(kNsaKeyTile, hi - k0)));
  }
}

// dk/dv tasks: per (sequence, kv head, block) its tiles of at most kNsaKeyTile keys.
EJK_HD i64 nsa_key_tasks(const NsaParams& p) {
  return p.batch * p.heads_kv * ceil_div(p.seqlen, p.block_size) * ceil_div(p.block_size, kNsaKeyTile);
}

}  // namespace ejk
