#include "ops/blocksparse_attention/bsa_op.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <new>
#include <vector>

#include "ejk/core/error.h"
#include "engine/call.h"
#include "ops/blocksparse_attention/bsa_lists.h"
#include "ops/blocksparse_attention/bsa_reference.h"

namespace ejk::ops {
namespace {

[[noreturn]] void bad(std::string_view op, std::string_view arg, const std::string& what) {
  throw InvalidArgument(fmt::format("{}: {}: {}", op, arg, what));
}

// The blob plan_metadata writes: four counts, then the arrays in BlocksparseLists' order.
struct BlobHeader {
  int64_t row_offsets, row_entries, col_offsets, col_entries;
};

void append(std::vector<unsigned char>& blob, const std::vector<int32_t>& a) {
  const size_t at = blob.size();
  blob.resize(at + a.size() * sizeof(int32_t));
  if (!a.empty()) std::memcpy(blob.data() + at, a.data(), a.size() * sizeof(int32_t));
}

}  // namespace

BlocksparseOp::BlocksparseOp(std::string_view kernel_op, bool backward_)
    : OpDef(kernel_op), backward(backward_), q(tensor("q")), k(tensor("k")), v(tensor("v")),
      block_mask(tensor("block_mask")), q_segment_ids(tensor("q_segment_ids")),
      kv_segment_ids(tensor("kv_segment_ids")), softmax_aux(tensor("softmax_aux")), out(tensor("out")),
      lse(tensor("lse")), d_out(backward_ ? tensor("d_out") : -1), d_lse(backward_ ? tensor("d_lse") : -1),
      dq(backward_ ? tensor("dq") : -1), dk(backward_ ? tensor("dk") : -1), dv(backward_ ? tensor("dv") : -1),
      dsoftmax_aux(backward_ ? tensor("dsoftmax_aux") : -1), softmax_scale(scalar("softmax_scale")),
      causal(scalar("causal")), sliding_window(scalar("sliding_window")), logits_soft_cap(scalar("logits_soft_cap")),
      q_blocksize(scalar("q_blocksize")), kv_blocksize(scalar("kv_blocksize")), sym_B(symbol("B")),
      sym_Hq(symbol("Hq")), sym_Hkv(symbol("Hkv")), sym_Sq(symbol("Sq")), sym_Sk(symbol("Sk")), sym_D(symbol("D")),
      sym_S(symbol("S")), sym_NQ(symbol("NQ")), sym_NK(symbol("NK")), pv_block_q(problem_var("layout_block_q")),
      pv_block_k(problem_var("layout_block_k")) {}

void BlocksparseOp::check(const engine::Bound& b) const {
  const std::string_view op = name();
  const int64_t hq = b.size(sym_Hq), hkv = b.size(sym_Hkv);
  if (hkv <= 0 || hq % hkv != 0)
    bad(op, "k", fmt::format("number of kv heads ({}) must divide the number of q heads ({})", hkv, hq));
  if (b.size(sym_D) <= 0) bad(op, "q", fmt::format("head_dim must be positive, got {}", b.size(sym_D)));
  if (b.has(softmax_aux) && b.size(sym_S) < 1) bad(op, "softmax_aux", "needs at least one sink");
  const int64_t bq = b.i64(q_blocksize), bk = b.i64(kv_blocksize);
  if (bq % 16 != 0) bad(op, "q_blocksize", fmt::format("must be a multiple of 16, got {}", bq));
  if (bk % 16 != 0) bad(op, "kv_blocksize", fmt::format("must be a multiple of 16, got {}", bk));
  const int64_t nq = (b.size(sym_Sq) + bq - 1) / bq, nk = (b.size(sym_Sk) + bk - 1) / bk;
  if (b.has(block_mask)) {
    if (b.size(sym_NQ) != nq)
      bad(op, "block_mask", fmt::format("dim 2 (NQ) must be ceil(Sq / q_blocksize) = ceil({} / {}) = {}, got {}",
                                        b.size(sym_Sq), bq, nq, b.size(sym_NQ)));
    if (b.size(sym_NK) != nk)
      bad(op, "block_mask", fmt::format("dim 3 (NK) must be ceil(Sk / kv_blocksize) = ceil({} / {}) = {}, got {}",
                                        b.size(sym_Sk), bk, nk, b.size(sym_NK)));
  }
  // The lists index their entries with int32 (blob and kernels): every block pair of every
  // (batch, layout head) must fit, so that no accepted problem overflows them.
  const int64_t heads = b.has(block_mask) && b.tensor(block_mask).shape[1] != 1 ? hq : 1;
  const double pairs = double(b.size(sym_B)) * double(heads) * double(nq) * double(nk);
  if (pairs > double(INT32_MAX) / 2)
    bad(op, "q_blocksize",
        fmt::format("{} x {} blocks per (batch, head) over {} planes is {:.3g} block pairs, more than the lists "
                    "index (2^30): take larger q_blocksize and kv_blocksize",
                    nq, nk, b.size(sym_B) * heads, pairs));
}

void BlocksparseOp::problem(const engine::Bound& b, engine::ProblemValues& v) const {
  v.put(pv_block_q, b.i64(q_blocksize));
  v.put(pv_block_k, b.i64(kv_blocksize));
}

FlashFwdParams BlocksparseOp::forward_params(const engine::Bound& b) const {
  FlashFwdParams p{};
  p.q = b.data(q), p.k = b.data(k), p.v = b.data(v), p.out = b.data(out);
  p.lse = static_cast<float*>(b.data(lse));
  // Layout positions: 0 batch, 1 head, 2 sequence, 3 dim.
  p.q_stride_b = b.stride(q, 0), p.q_stride_h = b.stride(q, 1), p.q_stride_s = b.stride(q, 2);
  p.k_stride_b = b.stride(k, 0), p.k_stride_h = b.stride(k, 1), p.k_stride_s = b.stride(k, 2);
  p.v_stride_b = b.stride(v, 0), p.v_stride_h = b.stride(v, 1), p.v_stride_s = b.stride(v, 2);
  if (b.has(out)) p.o_stride_b = b.stride(out, 0), p.o_stride_h = b.stride(out, 1), p.o_stride_s = b.stride(out, 2);
  if (b.has(lse)) p.lse_stride_b = b.stride(lse, 0), p.lse_stride_h = b.stride(lse, 1);
  p.batch = b.size(sym_B), p.heads_q = b.size(sym_Hq), p.heads_kv = b.size(sym_Hkv), p.head_dim = b.size(sym_D);
  p.seqlen_q = b.size(sym_Sq), p.seqlen_k = b.size(sym_Sk);
  if (b.has(q_segment_ids)) {
    p.q_segment_ids = static_cast<const i32*>(b.data(q_segment_ids));
    p.kv_segment_ids = static_cast<const i32*>(b.data(kv_segment_ids));
    p.q_seg_stride_b = b.stride(q_segment_ids, 0), p.kv_seg_stride_b = b.stride(kv_segment_ids, 0);
  }
  if (b.has(softmax_aux)) {
    p.softmax_aux = static_cast<const float*>(b.data(softmax_aux));
    p.num_sinks = b.size(sym_S);
    p.sinks_stride_h = b.stride(softmax_aux, 0);  // [S]: no head dim, shared by every head
  }
  p.scale = b.given(softmax_scale) ? float(b.f64(softmax_scale)) : 1.0f / std::sqrt(float(p.head_dim));
  p.mask.causal = b.flag(causal);
  p.mask.window_left = p.mask.window_right = kUnbounded;
  if (b.given(sliding_window)) {
    // Bounds past every row mean no limit; clamped so q - left and q + right cannot overflow.
    const int64_t rows = std::max(p.seqlen_q, p.seqlen_k);
    const auto lr = b.pair(sliding_window);
    p.mask.window_left = std::min(lr[0], rows), p.mask.window_right = std::min(lr[1], rows);
  }
  if (b.given(logits_soft_cap)) p.softcap = float(b.f64(logits_soft_cap));
  p.normalize_output = 1;
  return p;
}

BlocksparseLists BlocksparseOp::list_shape(const engine::Bound& b) const {
  BlocksparseLists l{};
  l.block_q = b.i64(q_blocksize), l.block_k = b.i64(kv_blocksize);
  l.num_q_blocks = (b.size(sym_Sq) + l.block_q - 1) / l.block_q;
  l.num_k_blocks = (b.size(sym_Sk) + l.block_k - 1) / l.block_k;
  // One layout for every head unless block_mask has a head dim of its own.
  l.heads = b.has(block_mask) && b.tensor(block_mask).shape[1] != 1 ? b.size(sym_Hq) : 1;
  return l;
}

void BlocksparseOp::plan_metadata(const engine::Bound& b, const engine::PlanData& plan,
                                  std::vector<unsigned char>& blob) const {
  // The CUDA kernels read the layout where it is, on the device (bsa_cuda.cpp): no host lists.
  if (plan.backend != Backend::cpu) return;
  const FlashFwdParams p = forward_params(b);
  BlocksparseListInputs in;
  in.block_mask = b.has(block_mask) ? &b.tensor(block_mask) : nullptr;
  in.q_segment_ids = b.has(q_segment_ids) ? &b.tensor(q_segment_ids) : nullptr;
  in.kv_segment_ids = b.has(kv_segment_ids) ? &b.tensor(kv_segment_ids) : nullptr;
  in.mask = p.mask, in.batch = p.batch, in.seqlen_q = p.seqlen_q, in.seqlen_k = p.seqlen_k;
  const BlocksparseListData d = build_block_lists(in, list_shape(b), backward);
  const BlobHeader h{int64_t(d.row_offsets.size()), int64_t(d.row_entries.size()), int64_t(d.col_offsets.size()),
                     int64_t(d.col_entries.size())};
  blob.resize(sizeof h);
  std::memcpy(blob.data(), &h, sizeof h);
  for (const auto* a : {&d.row_offsets, &d.row_entries, &d.col_offsets, &d.col_entries}) append(blob, *a);
}

void BlocksparseOp::plan_facts(const engine::PlanData& plan, void* facts) const {
  auto* f = new (facts) BlocksparsePlanFacts{};
  f->block_q = plan.key.get_int("block_q"), f->block_k = plan.key.get_int("block_k");
}

engine::CpuWork BlocksparseOp::cpu_prepare(const engine::Bound& b, const engine::PlanData& plan, void* params) const {
  static_assert(sizeof(BlocksparseFwdParams) <= kParamBytes && sizeof(BlocksparseBwdParams) <= kParamBytes);
  const auto& f = plan.facts_as<BlocksparsePlanFacts>();
  BlocksparseLists l = list_shape(b);
  // A task stays in one layout row (forward, dq) or column (dk, dv): a tile size given as a
  // tuning value must divide the layout's block.
  if (l.block_q % f.block_q != 0)
    bad(name(), "q_blocksize", fmt::format("{} is not a multiple of the variant's block_q {}", l.block_q, f.block_q));
  if (backward && l.block_k % f.block_k != 0)
    bad(name(), "kv_blocksize", fmt::format("{} is not a multiple of the variant's block_k {}", l.block_k, f.block_k));
  BlobHeader h;
  std::memcpy(&h, b.metadata->data(), sizeof h);
  const auto* a = reinterpret_cast<const i32*>(b.metadata->data() + sizeof h);
  l.row_offsets = a, l.row_entries = a + h.row_offsets;
  if (backward) l.col_offsets = l.row_entries + h.row_entries, l.col_entries = l.col_offsets + h.col_offsets;
  if (!backward) {
    auto* p = new (params) BlocksparseFwdParams{forward_params(b), l};
    return {flash_fwd_num_tasks(p->f, f.block_q)};
  }
  auto* p = new (params) BlocksparseBwdParams{backward_params(b), l};
  if (b.has(dsoftmax_aux) && !b.has(softmax_aux))
    std::memset(b.data(dsoftmax_aux), 0, sizeof(float));  // the 0-d placeholder reads 0
  return {bsa_bwd_tasks(*p, f.block_q, f.block_k).total()};
}

FlashBwdParams BlocksparseOp::backward_params(const engine::Bound& b) const {
  FlashBwdParams g{};
  g.fwd = forward_params(b);
  auto strides = [&](int t, i64& sb, i64& ss, i64& sh) { sb = b.stride(t, 0), sh = b.stride(t, 1), ss = b.stride(t, 2); };
  g.d_out = b.data(d_out);
  g.d_lse = static_cast<const float*>(b.data(d_lse));
  strides(d_out, g.do_stride_b, g.do_stride_s, g.do_stride_h);
  g.dq = b.data(dq), g.dk = b.data(dk), g.dv = b.data(dv);
  strides(dq, g.dq_stride_b, g.dq_stride_s, g.dq_stride_h);
  strides(dk, g.dk_stride_b, g.dk_stride_s, g.dk_stride_h);
  strides(dv, g.dv_stride_b, g.dv_stride_s, g.dv_stride_h);
  if (b.has(dsoftmax_aux) && b.has(softmax_aux)) g.dsoftmax_aux = static_cast<float*>(b.data(dsoftmax_aux));
  return g;
}

#if !EJK_HAVE_CUDA
void BlocksparseOp::cuda_launch(const engine::Bound&, const engine::PlanData&, engine::CudaLaunchContext&) const {
  throw BackendUnavailable(
      fmt::format("{}: this build has no CUDA backend (configured with EJK_ENABLE_CUDA=OFF)", name()));
}
int64_t BlocksparseOp::cuda_dynamic_smem(const VariantKey&) const { return 0; }
engine::OpDef::Workspace BlocksparseOp::cuda_workspace(const engine::Bound&, const engine::PlanData&) const {
  return {};
}
#endif

void BlocksparseOp::reference(const engine::Bound& b, double* const* outputs) const {
  BlocksparseReferenceProblem pr;
  pr.p = forward_params(b);
  pr.dtype = b.dtype;
  pr.block_mask = b.has(block_mask) ? &b.tensor(block_mask) : nullptr;
  pr.block_q = b.i64(q_blocksize), pr.block_k = b.i64(kv_blocksize);
  if (!backward) return reference_blocksparse_fwd(pr, outputs[out], outputs[lse]);
  BlocksparseReferenceGrads g;
  g.d_out = b.data(d_out);
  g.do_stride_b = b.stride(d_out, 0), g.do_stride_h = b.stride(d_out, 1), g.do_stride_s = b.stride(d_out, 2);
  g.d_lse = static_cast<const float*>(b.data(d_lse));
  g.dq = outputs[dq], g.dk = outputs[dk], g.dv = outputs[dv];
  if (b.has(softmax_aux)) g.dsoftmax_aux = outputs[dsoftmax_aux];
  reference_blocksparse_bwd(pr, g);
  if (!b.has(softmax_aux) && outputs[dsoftmax_aux]) outputs[dsoftmax_aux][0] = 0;
}

double BlocksparseOp::flops(const engine::Bound& b) const {
  // The pairs of the listed blocks (partial blocks counted whole), 4 FLOPs per pair and head dim;
  // the backward 2.5 times that.
  if (b.args->shapes_only) return 0;
  // A device-resident layout or segment ids are not read back to count: no count.
  for (int t : {block_mask, q_segment_ids})
    if (b.has(t) && b.tensor(t).device.kind != DeviceKind::cpu) return 0;
  const FlashFwdParams p = forward_params(b);
  BlocksparseListInputs in;
  in.block_mask = b.has(block_mask) ? &b.tensor(block_mask) : nullptr;
  in.q_segment_ids = b.has(q_segment_ids) ? &b.tensor(q_segment_ids) : nullptr;
  in.kv_segment_ids = b.has(kv_segment_ids) ? &b.tensor(kv_segment_ids) : nullptr;
  in.mask = p.mask, in.batch = p.batch, in.seqlen_q = p.seqlen_q, in.seqlen_k = p.seqlen_k;
  const BlocksparseLists l = list_shape(b);
  const BlocksparseListData d = build_block_lists(in, l, false);
  const double blocks = double(d.row_entries.size()) * double(p.heads_q / l.heads);
  const double pairs = blocks * double(std::min(l.block_q, p.seqlen_q) * std::min(l.block_k, p.seqlen_k));
  return (backward ? 2.5 : 1.0) * 4.0 * double(p.head_dim) * pairs;
}

const BlocksparseOp& blocksparse_attention_op() {
  static const BlocksparseOp op("bsa_fwd", false);
  return op;
}

const BlocksparseOp& blocksparse_attention_backward_op() {
  static const BlocksparseOp op("bsa_bwd", true);
  return op;
}

EJK_REGISTER_OP(blocksparse_attention_op);
EJK_REGISTER_OP(blocksparse_attention_backward_op);

}  // namespace ejk::ops
