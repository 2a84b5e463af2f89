#include "ops/recurrent_attention/recurrent_op.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <new>
#include <vector>

#include "ejk/core/error.h"
#include "engine/call.h"
#include "engine/metadata.h"
#include "ops/recurrent_attention/recurrent_reference.h"
#include "thread_pool.h"

namespace ejk::ops {
namespace {

bool given(const Scalar& s) { return !std::holds_alternative<std::monostate>(s); }

double as_double(const Scalar& s) {
  if (const auto* d = std::get_if<double>(&s)) return *d;
  if (const auto* i = std::get_if<int64_t>(&s)) return double(*i);
  return 0;
}

bool as_bool(const Scalar& s) {
  if (const auto* x = std::get_if<bool>(&s)) return *x;
  if (const auto* i = std::get_if<int64_t>(&s)) return *i != 0;
  return false;
}

}  // namespace

RecurrentOp::RecurrentOp(std::string_view kernel_op, bool backward)
    : OpDef(kernel_op), backward(backward), q(tensor("q")), k(tensor("k")), v(tensor("v")), g(tensor("g")),
      g_gamma(tensor("g_gamma")), gk(tensor("gk")), gv(tensor("gv")), initial_state(tensor("initial_state")),
      cu_seqlens(tensor("cu_seqlens")), g_head(tensor("g_head")), o(backward ? -1 : tensor("o")),
      final_state(backward ? -1 : tensor("final_state")), d_o(backward ? tensor("d_o") : -1),
      d_final_state(backward ? tensor("d_final_state") : -1), dq(backward ? tensor("dq") : -1),
      dk(backward ? tensor("dk") : -1), dv(backward ? tensor("dv") : -1), dg(backward ? tensor("dg") : -1),
      dgk(backward ? tensor("dgk") : -1), dgv(backward ? tensor("dgv") : -1),
      d_initial_state(backward ? tensor("d_initial_state") : -1), softmax_scale(scalar("softmax_scale")),
      reverse(scalar("reverse")), sym_B(symbol("B")), sym_T(symbol("T")), sym_H(symbol("H")), sym_K(symbol("K")),
      sym_V(symbol("V")), sym_N(symbol("N")) {}

void RecurrentOp::check(const engine::Bound& b) const {
  if (const Scalar& s = b.scalar(softmax_scale); given(s) && !std::isfinite(as_double(s)))
    throw InvalidArgument(fmt::format("{}: softmax_scale: must be finite, got {}", name(), as_double(s)));
  for (int sym : {sym_K, sym_V})
    if (b.size(sym) < 1)
      throw InvalidArgument(fmt::format("{}: {}: its last dim ({}) must be at least 1, got 0", name(),
                                        sym == sym_K ? "q" : "v", sym == sym_K ? "K" : "V"));
  const bool varlen = b.mode >= 0;
  if (varlen && b.size(sym_T) > INT32_MAX)
    throw InvalidArgument(fmt::format("{}: q: {} packed tokens do not fit cu_seqlens' i32 entries", name(), b.size(sym_T)));
  if (varlen && b.tensor(cu_seqlens).device.kind == DeviceKind::cpu && !b.args->shapes_only)
    engine::check_offsets(name(), "cu_seqlens", b.tensor(cu_seqlens), b.size(sym_T));
}

RecurrentParams RecurrentOp::params(const engine::Bound& b) const {
  RecurrentParams p{};
  const bool varlen = b.mode >= 0;
  auto tokens = [&](int t) {
    RecurrentTokens x{};
    if (t < 0 || !b.has(t)) return x;
    x.data = b.data(t);
    x.sb = varlen ? 0 : b.stride(t, 0);
    x.st = b.stride(t, 1), x.sh = b.stride(t, 2);
    return x;
  };
  auto floats = [&](int t) { return static_cast<float*>(b.data(t)); };
  p.q = tokens(q), p.k = tokens(k), p.v = tokens(v), p.g = tokens(g), p.gk = tokens(gk), p.gv = tokens(gv);
  p.gh = tokens(g_head);
  p.g_gamma = floats(g_gamma), p.h0 = floats(initial_state);
  p.heads = b.size(sym_H), p.dk_ = b.size(sym_K), p.dv_ = b.size(sym_V);
  if (varlen) {
    p.cu_seqlens = static_cast<const i32*>(b.data(cu_seqlens));
    p.sequences = b.size(sym_N), p.total = b.size(sym_T);
  } else {
    p.sequences = b.size(sym_B), p.seqlen = b.size(sym_T), p.total = p.sequences * p.seqlen;
  }
  const Scalar& scale = b.scalar(softmax_scale);
  p.scale = float(given(scale) ? as_double(scale) : 1.0 / std::sqrt(double(p.dk_)));
  p.reverse = as_bool(b.scalar(reverse));
  if (backward) {
    p.d_o = tokens(d_o), p.dq = tokens(dq), p.dk = tokens(dk), p.dv = tokens(dv);
    p.dg = tokens(dg), p.dgk = tokens(dgk), p.dgv = tokens(dgv);
    p.dht = floats(d_final_state), p.dh0 = floats(d_initial_state);
  } else {
    p.o = tokens(o), p.ht = floats(final_state);
  }
  return p;
}

bool RecurrentOp::chunked(const VariantKey& key) const {
  if (key.backend != "cuda") return false;
  return recurrent_chunked(key.get_enum("dtype") != "f32", key.get_int("head_k"), key.get_int("head_v"),
                           key.get_flag("gate_g"), key.get_flag("gate_k"), key.get_flag("gate_v"));
}

void RecurrentOp::plan_facts(const engine::PlanData& plan, void* facts) const {
  new (facts) RecurrentFacts{chunked(plan.key)};
}

int64_t RecurrentOp::cuda_dynamic_smem(const VariantKey& key) const {
  if (!chunked(key)) return 0;
  const int64_t k = key.get_int("head_k");
  return backward ? linear_chunk_bwd_smem_bytes(k) : recurrent_chunk_smem_bytes(k);
}

int64_t recurrent_chunk(int64_t longest) {
  return std::max<int64_t>(1, int64_t(std::ceil(std::sqrt(double(std::max<int64_t>(longest, 1))))));
}

engine::CpuWork RecurrentOp::cpu_prepare(const engine::Bound& b, const engine::PlanData&, void* params) const {
  static_assert(sizeof(RecurrentParams) <= kParamBytes);
  RecurrentParams& p = *new (params) RecurrentParams(this->params(b));
  if (p.sequences == 0 || p.heads == 0) return {0};
  if (!backward) {
    p.v_tile = kRecurrentCpuColumns, p.v_tiles = ceil_div<int64_t>(p.dv_, p.v_tile);
    return {p.sequences * p.heads * p.v_tiles};
  }
  // Lanes of (sequence, head) units, each with a workspace of its own (the calling thread's
  // buffer, reused by its next call; it waits for the tasks).
  const int64_t longest = p.cu_seqlens ? engine::check_offsets(name(), "cu_seqlens", b.tensor(cu_seqlens), p.total)
                                       : p.seqlen;
  p.chunk = recurrent_chunk(longest);
  p.chunks_cap = ceil_div<int64_t>(longest, p.chunk);
  p.lanes = std::min<int64_t>(p.sequences * p.heads, 2 * ThreadPool::global().size());
  thread_local std::vector<float> work;
  const size_t need = size_t(p.lanes * recurrent_cpu_lane_floats(p.dk_, p.dv_, p.chunks_cap, p.chunk));
  if (work.size() < need) work.resize(need);
  p.work = work.data();
  return {p.lanes};
}

#if !EJK_HAVE_CUDA
void RecurrentOp::cuda_launch(const engine::Bound&, const engine::PlanData&, engine::CudaLaunchContext&) const {
  throw BackendUnavailable(
      fmt::format("{}: this build has no CUDA backend (configured with EJK_ENABLE_CUDA=OFF)", name()));
}
engine::OpDef::Workspace RecurrentOp::cuda_workspace(const engine::Bound&, const engine::PlanData&) const { return {}; }
#endif

void RecurrentOp::reference(const engine::Bound& b, double* const* out) const {
  RecurrentRefOut r;
  if (backward) {
    r.dq = out[dq], r.dk = out[dk], r.dv = out[dv], r.dg = out[dg], r.dgk = out[dgk], r.dgv = out[dgv];
    r.dh0 = out[d_initial_state];
  } else {
    r.o = out[o], r.ht = out[final_state];
  }
  reference_recurrent(params(b), b.dtype, r);
}

const RecurrentOp& recurrent_attention_op() {
  static const RecurrentOp op("recurrent_fwd", false);
  return op;
}

const RecurrentOp& recurrent_attention_backward_op() {
  static const RecurrentOp op("recurrent_bwd", true);
  return op;
}

EJK_REGISTER_OP(recurrent_attention_op);
EJK_REGISTER_OP(recurrent_attention_backward_op);

}  // namespace ejk::ops
