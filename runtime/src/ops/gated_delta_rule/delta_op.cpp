#include "ops/gated_delta_rule/delta_op.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <new>
#include <vector>

#include "ejk/core/error.h"
#include "engine/call.h"
#include "ops/gated_delta_rule/delta_reference.h"
#include "thread_pool.h"

namespace ejk::ops {
namespace {

bool given(const Scalar& s) { return !std::holds_alternative<std::monostate>(s); }

double as_double(const Scalar& s) {
  if (const auto* d = std::get_if<double>(&s)) return *d;
  if (const auto* i = std::get_if<int64_t>(&s)) return double(*i);
  return 0;
}

}  // namespace

int64_t delta_chunk(int64_t seqlen) {
  return std::max<int64_t>(1, int64_t(std::ceil(std::sqrt(double(std::max<int64_t>(seqlen, 1))))));
}

DeltaOp::DeltaOp(std::string_view kernel_op, bool backward)
    : OpDef(kernel_op), backward(backward), q(tensor("q")), k(tensor("k")), v(tensor("v")), beta(tensor("beta")),
      decay(tensor("decay")), seg_ids(tensor("seg_ids")), initial_state(tensor("initial_state")),
      o(backward ? -1 : tensor("o")), final_state(backward ? -1 : tensor("final_state")),
      d_o(backward ? tensor("d_o") : -1), d_final_state(backward ? tensor("d_final_state") : -1),
      dq(backward ? tensor("dq") : -1), dk(backward ? tensor("dk") : -1), dv(backward ? tensor("dv") : -1),
      dbeta(backward ? tensor("dbeta") : -1), ddecay(backward ? tensor("ddecay") : -1),
      d_initial_state(backward ? tensor("d_initial_state") : -1), softmax_scale(scalar("softmax_scale")),
      use_qk_l2norm(scalar("use_qk_l2norm")), sym_B(symbol("B")), sym_T(symbol("T")), sym_H(symbol("H")),
      sym_K(symbol("K")), sym_V(symbol("V")), pv_seqlen(backward ? -1 : problem_var("seqlen")) {}

void DeltaOp::problem(const engine::Bound& b, engine::ProblemValues& v) const {
  if (!backward) v.put(pv_seqlen, b.size(sym_T));
}

void DeltaOp::plan_facts(const engine::PlanData& plan, void* facts) const {
  static_assert(sizeof(DeltaFacts) <= kFactBytes);
  auto* f = new (facts) DeltaFacts{};
  if (!backward) f->chunk = plan.key.get_int("chunk");
}

void DeltaOp::check(const engine::Bound& b) const {
  for (int sym : {sym_K, sym_V})
    if (b.size(sym) < 1)
      throw InvalidArgument(fmt::format("{}: {}: its last dim ({}) must be at least 1, got 0", name(),
                                        sym == sym_K ? "q" : "v", sym == sym_K ? "K" : "V"));
}

DeltaParams DeltaOp::params(const engine::Bound& b) const {
  DeltaParams p{};
  auto tokens = [&](int t) {
    DeltaTokens x{};
    if (!b.has(t)) return x;
    x.data = b.data(t);
    x.sb = b.stride(t, 0), x.st = b.stride(t, 1), x.sh = b.stride(t, 2);
    return x;
  };
  auto floats = [&](int t) { return static_cast<float*>(b.data(t)); };
  p.q = tokens(q), p.k = tokens(k), p.v = tokens(v), p.beta = tokens(beta), p.decay = tokens(decay);
  p.seg_ids = static_cast<const i32*>(b.data(seg_ids));
  p.h0 = floats(initial_state);
  p.sequences = b.size(sym_B), p.seqlen = b.size(sym_T);
  p.heads = b.size(sym_H), p.dk_ = b.size(sym_K), p.dv_ = b.size(sym_V);
  const Scalar& scale = b.scalar(softmax_scale);
  p.scale = float(given(scale) ? as_double(scale) : 1.0 / std::sqrt(double(p.dk_)));
  const Scalar& norm = b.scalar(use_qk_l2norm);
  p.l2norm = !given(norm) || std::get<bool>(norm) ? 1 : 0;
  if (backward) {
    p.d_o = tokens(d_o), p.dq = tokens(dq), p.dk = tokens(dk), p.dv = tokens(dv);
    p.dbeta = tokens(dbeta), p.ddecay = tokens(ddecay);
    p.dht = floats(d_final_state), p.dh0 = floats(d_initial_state);
  } else {
    p.o = tokens(o), p.ht = floats(final_state);
  }
  return p;
}

engine::CpuWork DeltaOp::cpu_prepare(const engine::Bound& b, const engine::PlanData& plan, void* params) const {
  static_assert(sizeof(DeltaParams) <= kParamBytes);
  DeltaParams& p = *new (params) DeltaParams(this->params(b));
  if (p.sequences == 0 || p.heads == 0) return {0};
  const bool chunked = !backward && plan.facts_as<DeltaFacts>().chunk > 1;
  if (!backward && !chunked) {
    p.v_tile = kDeltaCpuColumns, p.v_tiles = ceil_div<int64_t>(p.dv_, p.v_tile);
    return {p.sequences * p.heads * p.v_tiles};
  }
  // Lanes of (sequence, head) units, each with a workspace of its own (the calling thread's
  // buffer, reused by its next call; it waits for the tasks).
  p.lanes = std::min<int64_t>(p.sequences * p.heads, 2 * ThreadPool::global().size());
  int64_t lane_floats = 0;
  if (chunked) {
    lane_floats = delta_cpu_chunk_lane_floats(p.dk_, p.dv_);
  } else {
    p.chunk = delta_chunk(p.seqlen);
    p.chunks_cap = ceil_div<int64_t>(p.seqlen, p.chunk);
    lane_floats = delta_cpu_lane_floats(p.dk_, p.dv_, p.chunks_cap, p.chunk);
  }
  thread_local std::vector<float> work;
  const size_t need = size_t(p.lanes * lane_floats);
  if (work.size() < need) work.resize(need);
  p.work = work.data();
  return {p.lanes};
}

#if !EJK_HAVE_CUDA
void DeltaOp::cuda_launch(const engine::Bound&, const engine::PlanData&, engine::CudaLaunchContext&) const {
  throw BackendUnavailable(
      fmt::format("{}: this build has no CUDA backend (configured with EJK_ENABLE_CUDA=OFF)", name()));
}
engine::OpDef::Workspace DeltaOp::cuda_workspace(const engine::Bound&, const engine::PlanData&) const { return {}; }
#endif

void DeltaOp::reference(const engine::Bound& b, double* const* out) const {
  DeltaRefOut r;
  if (backward) {
    r.dq = out[dq], r.dk = out[dk], r.dv = out[dv], r.dbeta = out[dbeta], r.ddecay = out[ddecay];
    r.dh0 = out[d_initial_state];
  } else {
    r.o = out[o], r.ht = out[final_state];
  }
  reference_delta(params(b), b.dtype, r);
}

const DeltaOp& gated_delta_rule_op() {
  static const DeltaOp op("delta_fwd", false);
  return op;
}

const DeltaOp& gated_delta_rule_backward_op() {
  static const DeltaOp op("delta_bwd", true);
  return op;
}

EJK_REGISTER_OP(gated_delta_rule_op);
EJK_REGISTER_OP(gated_delta_rule_backward_op);

}  // namespace ejk::ops
