#include "ops/flash_attention/flash_bwd_op.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ejk/core/error.h"
#include "ejk/kernels/cuda/flash_bwd_launch.h"
#include "engine/call.h"
#include "engine/metadata.h"
#include "ops/flash_attention/flash_args.h"
#include "ops/flash_attention/flash_op.h"
#include "ops/flash_attention/cpu_kv_staging.h"
#include "ops/flash_attention/flash_bwd_reference.h"
#include "registry.h"

namespace ejk::ops {

FlashAttentionBackwardOp::FlashAttentionBackwardOp()
    : OpDef("flash_bwd"),
      q(tensor("q")), k(tensor("k")), v(tensor("v")), bias(tensor("bias")), attention_mask(tensor("attention_mask")),
      q_segment_ids(tensor("q_segment_ids")),
      kv_segment_ids(tensor("kv_segment_ids")), cum_seqlens_q(tensor("cum_seqlens_q")),
      cum_seqlens_k(tensor("cum_seqlens_k")), softmax_aux(tensor("softmax_aux")), out(tensor("out")), lse(tensor("lse")),
      d_out(tensor("d_out")), d_lse(tensor("d_lse")), dq(tensor("dq")), dk(tensor("dk")), dv(tensor("dv")), dbias(tensor("dbias")),
      dsoftmax_aux(tensor("dsoftmax_aux")), softmax_scale(scalar("softmax_scale")), causal(scalar("causal")),
      sliding_window(scalar("sliding_window")), logits_soft_cap(scalar("logits_soft_cap")),
      normalize_output(scalar("normalize_output")), max_seqlen_q(scalar("max_seqlen_q")),
      max_seqlen_k(scalar("max_seqlen_k")),
      dropout_prob(scalar("dropout_prob")), dropout_seed(scalar("dropout_seed")), sym_D(symbol("D")), sym_Hq(symbol("Hq")), sym_Hkv(symbol("Hkv")),
      sym_B(symbol("B")), sym_Sq(symbol("Sq")), sym_Sk(symbol("Sk")), sym_N(symbol("N")), sym_Tq(symbol("Tq")),
      sym_Tk(symbol("Tk")), sym_S(symbol("S")), pv_seqlen_q(problem_var("seqlen_q")),
      pv_seqlen_k(problem_var("seqlen_k")) {}

void FlashAttentionBackwardOp::check(const engine::Bound& b) const {
  flash_args::check(*this, b);
  if (const Scalar& n = b.scalar(normalize_output); flash_args::given(n) && !std::get<bool>(n))
    flash_args::bad(name(), "normalize_output",
                    "must be true: an unnormalized output's backward needs each row's max, which the forward "
                    "does not save");
}

void FlashAttentionBackwardOp::problem(const engine::Bound& b, engine::ProblemValues& v) const {
  v.put(pv_seqlen_q, flash_args::longest(*this, b, false));
  v.put(pv_seqlen_k, flash_args::longest(*this, b, true));
}

FlashBwdParams FlashAttentionBackwardOp::params(const engine::Bound& b) const {
  FlashBwdParams bp{};
  bp.fwd = flash_args::forward_params(*this, b);
  // Layout positions 0..3: batch (absent for packed rank-3 tensors: stride 0), seq, head, dim.
  auto strides = [&](int t, i64& sb, i64& ss, i64& sh) {
    sb = b.stride(t, 0), ss = b.stride(t, 1), sh = b.stride(t, 2);
  };
  bp.d_out = b.data(d_out);
  bp.d_lse = static_cast<const float*>(b.data(d_lse));  // contiguous, lse's layout
  strides(d_out, bp.do_stride_b, bp.do_stride_s, bp.do_stride_h);
  bp.dq = b.data(dq), bp.dk = b.data(dk), bp.dv = b.data(dv);
  if (b.has(dq)) strides(dq, bp.dq_stride_b, bp.dq_stride_s, bp.dq_stride_h);
  if (b.has(dk)) strides(dk, bp.dk_stride_b, bp.dk_stride_s, bp.dk_stride_h);
  if (b.has(dv)) strides(dv, bp.dv_stride_b, bp.dv_stride_s, bp.dv_stride_h);
  if (b.has(bias) && b.has(dbias)) {
    const TensorView& g = b.tensor(dbias);
    bp.dbias = g.data;
    bp.dbias_stride_b = g.shape[0] == 1 ? 0 : g.strides[0];  // size-1 dims broadcast, as bias's
    bp.dbias_stride_h = g.shape[1] == 1 ? 0 : g.strides[1];
    bp.dbias_stride_q = g.strides[2];
  }
  if (b.has(softmax_aux) && b.has(dsoftmax_aux)) bp.dsoftmax_aux = static_cast<float*>(b.data(dsoftmax_aux));
  return bp;
}

std::vector<VariantKey> FlashAttentionBackwardOp::companions(const VariantKey& key) const {
  if (key.backend != "cuda" || !key.get_flag("dmask")) return {};
  return {flash_mask_tiles_key(key.target)};  // the launch's kernel 1
}

void FlashAttentionBackwardOp::plan_facts(const engine::PlanData& plan, void* facts) const {
  auto* f = new (facts) FlashBwdPlanFacts{};
  const VariantKey& key = plan.key;
  f->block_q = key.get_int("block_q"), f->block_k = key.get_int("block_k");
  f->wgmma = key.backend == "cuda" &&
             cuda::flash_bwd_wgmma(key.target == "sm90a", key.get_flag("bias"), key.get_flag("dropout"),
                                   key.get_flag("dmask"), key.get_int("head_dim"), f->block_q, f->block_k);
}

engine::CpuWork FlashAttentionBackwardOp::cpu_prepare(const engine::Bound& b, const engine::PlanData& plan,
                                                      void* params) const {
  static_assert(sizeof(FlashBwdDropoutParams) <= kParamBytes);
  FlashBwdParams* pp = nullptr;
  if (flash_args::dropout_on(*this, b)) {
    // Dropout variants read their arguments after the base struct (flash_bwd_params.h).
    auto* d = new (params) FlashBwdDropoutParams{};
    static_cast<FlashBwdParams&>(*d) = this->params(b);
    d->dropout = flash_args::dropout_params(*this, b);
    pp = d;
  } else {
    pp = new (params) FlashBwdParams(this->params(b));
  }
  FlashBwdParams& p = *pp;
  const auto& f = plan.facts_as<FlashBwdPlanFacts>();
  // 0-d placeholders of absent inputs' gradients read as 0 (all-zero bits in every dtype).
  for (auto [grad, input] : {std::pair{dbias, bias}, std::pair{dsoftmax_aux, softmax_aux}})
    if (b.has(grad) && !b.has(input)) std::memset(b.data(grad), 0, dtype_size(b.tensor(grad).dtype));
  if (p.dbias && b.dtype != DType::f32) {
    // f32 sums of dbias per plane (flash_bwd.h's dq tasks); the calling thread's buffer, reused
    // by its next call (it waits for the tasks).
    const FlashBwdPlanes pl = flash_bwd_planes(p);
    thread_local std::vector<float> work;
    const size_t need = size_t(pl.batches * pl.heads * p.fwd.seqlen_q * p.fwd.seqlen_k);
    if (work.size() < need) work.resize(need);
    p.dbias_work = work.data();
  }
  // Every dq task re-reads its kv head's K and V: head-major rows as for the forward
  // (cpu_kv_staging.h); only k/v's pointers and strides change, dk/dv keep theirs.
  if (detail::kv_staging_wanted(p.fwd, f.block_q)) detail::stage_kv_head_major(p.fwd, b.dtype);
  return {flash_bwd_tasks(p, f.block_q, f.block_k).total()};
}

#if !EJK_HAVE_CUDA
void FlashAttentionBackwardOp::cuda_launch(const engine::Bound&, const engine::PlanData&,
                                           engine::CudaLaunchContext&) const {
  throw BackendUnavailable(
      fmt::format("{}: this build has no CUDA backend (configured with EJK_ENABLE_CUDA=OFF)", name()));
}
engine::OpDef::Workspace FlashAttentionBackwardOp::cuda_workspace(const engine::Bound&,
                                                                  const engine::PlanData&) const {
  return {};
}
#endif

void FlashAttentionBackwardOp::reference(const engine::Bound& b, double* const* outputs) const {
  FlashBwdReferenceOut r;
  r.dq = outputs[dq], r.dk = outputs[dk], r.dv = outputs[dv];
  if (b.has(bias)) r.dbias = outputs[dbias];
  if (b.has(softmax_aux)) r.dsoftmax_aux = outputs[dsoftmax_aux];
  const DropoutParams d = flash_args::dropout_params(*this, b);
  reference_flash_bwd(params(b), b.dtype, r, flash_args::dropout_on(*this, b) ? &d : nullptr);
  // 0-d placeholders of absent inputs' gradients read as 0.
  if (!b.has(bias) && outputs[dbias]) outputs[dbias][0] = 0;
  if (!b.has(softmax_aux) && outputs[dsoftmax_aux]) outputs[dsoftmax_aux][0] = 0;
}

double FlashAttentionBackwardOp::flops(const engine::Bound& b) const {
  // 2.5 times the forward's.
  const FlashFwdParams p = params(b).fwd;
  return 2.5 * 4.0 * double(p.heads_q * p.head_dim) * flash_args::visible_pairs(*this, b, p);
}

const FlashAttentionBackwardOp& flash_attention_backward_op() {
  static const FlashAttentionBackwardOp op;
  return op;
}

EJK_REGISTER_OP(flash_attention_backward_op);

}  // namespace ejk::ops
