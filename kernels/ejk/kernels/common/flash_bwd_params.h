// Arguments of the flash attention backward kernels, shared by every backend and the reference.
// Plain data: the runtime fills it after validating shapes; kernels trust it.
//
// Math (mask.h's logit, P = exp(s - lse) the forward's probabilities, normalize_output true):
//   dv_j  = sum_i P_ij do_i                         (over the query heads of the kv head's group)
//   dP_ij = do_i . v_j,   D_i = do_i . out_i - dlse_i   (do . out = sum_j P_ij dP_ij: sinks carry
//                                                  no value; d lse / d s_ij = P_ij)
//   dS_ij = P_ij (dP_ij - D_i)                      (gradient of the logit s)
//   dX_ij = dS_ij (1 - (s_ij / cap)^2)              (softcap variants: x is the logit before the cap)
//   dq_i  = scale sum_j dX_ij k_j,  dk_j = scale sum_i dX_ij q_i,  dbias_ij = sum dX_ij (over
//           the broadcast dims)
//   dsink_t = -sum_i exp(sink_t - lse_i) D_i        (over the rows of its head, or of every head)
#pragma once
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/flash_params.h"

namespace ejk {

struct FlashBwdParams {
  // q, k, v, out (read only here), lse, bias, segment ids, cu_seqlens, sinks, sizes, strides,
  // scale, cap and mask exactly as the forward's params.
  FlashFwdParams fwd;
  const void* d_out;  // out's layout
  void* dq;           // q's layout
  void* dk;           // k's layout
  void* dv;           // v's layout
  void* dbias;        // bias's layout (its broadcast dims size 1) or null
  float* dsoftmax_aux;  // softmax_aux's layout or null
  const float* d_lse;   // lse's layout (the same strides) or null: zeros

  i64 do_stride_b, do_stride_s, do_stride_h;
  i64 dq_stride_b, dq_stride_s, dq_stride_h;
  i64 dk_stride_b, dk_stride_s, dk_stride_h;
  i64 dv_stride_b, dv_stride_s, dv_stride_h;
  i64 dbias_stride_b, dbias_stride_h, dbias_stride_q;  // 0 along a broadcast dim; keys contiguous

  // An f32 accumulator of dbias, [planes, seqlen_q, seqlen_k] (planes as flash_bwd_planes),
  // where dbias is not itself f32 (the CPU) or always (CUDA); null otherwise.
  float* dbias_work;
  // CUDA: the 0-d placeholders of dbias / dsoftmax_aux when bias / softmax_aux is absent (the
  // kernel writes 0 there); null otherwise.
  void* zero_dbias;
  float* zero_dsoftmax_aux;
  // CUDA tensor-core path: delta (d_out . out - d_lse) per query row in lse's layout, f32, and
  // which of its launches runs (cuda/flash_bwd_launch.h); unused elsewhere.
  float* delta;
  int phase;
};

// The params of dropout variants, as the forward's (FlashFwdDropoutParams). With Z = keep / (1 - p)
// per pair, out = (P o Z) v, so dv_j = sum_i P_ij Z_ij do_i and dS_ij = P_ij (Z_ij dP_ij - D_i),
// with dP_ij = do_i . v_j and D_i = do_i . out_i - dlse_i unchanged (out is the dropped output).
using FlashBwdDropoutParams = WithDropout<FlashBwdParams>;
EJK_HD const DropoutParams& flash_dropout(const FlashBwdParams& p) {
  return static_cast<const FlashBwdDropoutParams&>(p).dropout;
}
template <bool kDropout> using FlashBwdArgs = DropoutArgs<FlashBwdParams, kDropout>;

// The exponent of P = exp(x - lse), never above 0: lse bounds every logit of its row, but a logit
// recomputed in f32 can pass it by an ulp of its size (thousands at a scale of 2^31), which exp
// would turn into an infinite probability. NaN stays NaN.
EJK_HD float prob_exponent(float x, float lse) {
  const float d = x - lse;
  return d > 0.0f ? 0.0f : d;
}

// Planes of dq tasks: a bias broadcast over the batch (heads) folds every batch (head) into one
// plane, so one task sums that plane's dbias in a fixed order; without a bias (or without dbias)
// every (batch, head) is a plane of its own.
struct FlashBwdPlanes {
  i64 batches, heads;  // planes along each dim
  i64 fold_b, fold_h;  // (batch, head) pairs per plane along each dim
};
EJK_HD FlashBwdPlanes flash_bwd_planes(const FlashBwdParams& p) {
  const FlashFwdParams& f = p.fwd;
  const bool fold_b = p.dbias && f.bias_stride_b == 0, fold_h = p.dbias && f.bias_stride_h == 0;
  return {fold_b ? 1 : f.batch, fold_h ? 1 : f.heads_q, fold_b ? f.batch : 1, fold_h ? f.heads_q : 1};
}

// The CPU's task list, in this order: dk/dv tasks, dq tasks, sink tasks.
struct FlashBwdTasks {
  i64 kv, q, sinks;
  EJK_HD i64 total() const { return kv + q + sinks; }
};
EJK_HD FlashBwdTasks flash_bwd_tasks(const FlashBwdParams& p, i64 block_q, i64 block_k) {
  const FlashFwdParams& f = p.fwd;
  const FlashBwdPlanes pl = flash_bwd_planes(p);
  const i64 sink_rows = p.dsoftmax_aux ? (f.sinks_stride_h != 0 ? f.heads_q : 1) : 0;
  return {f.batch * f.heads_kv * ceil_div(f.seqlen_k, block_k),
          pl.batches * pl.heads * ceil_div(f.seqlen_q, block_q), sink_rows};
}

}  // namespace ejk
