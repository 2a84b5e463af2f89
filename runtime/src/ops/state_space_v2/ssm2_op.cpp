#include "ops/state_space_v2/ssm2_op.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <new>
#include <vector>

#include "ejk/core/error.h"
#include "engine/call.h"
#include "engine/metadata.h"
#include "ops/state_space_v1/ssm1_op.h"
#include "ops/state_space_v2/ssm2_reference.h"

namespace ejk::ops {

Ssm2Op::Ssm2Op(std::string_view kernel_op, bool backward)
    : OpDef(kernel_op), backward(backward), x(tensor("x")), A(tensor("a")), B(tensor("b")), C(tensor("c")),
      D(tensor("d")), dt(tensor("dt")), initial_state(tensor("initial_state")),
      cu_seqlens(tensor("cu_seqlens")), y(backward ? -1 : tensor("y")),
      final_state(backward ? -1 : tensor("final_state")), d_y(backward ? tensor("d_y") : -1),
      d_final_state(backward ? tensor("d_final_state") : -1), dx(backward ? tensor("dx") : -1),
      dA(backward ? tensor("da") : -1), dB(backward ? tensor("db") : -1), dC(backward ? tensor("dc") : -1),
      dD(backward ? tensor("dd") : -1), ddt(backward ? tensor("ddt") : -1),
      d_initial_state(backward ? tensor("d_initial_state") : -1), sym_B(symbol("Bt")), sym_S(symbol("S")),
      sym_H(symbol("H")), sym_P(symbol("P")), sym_G(symbol("G")), sym_N(symbol("N")) {}

void Ssm2Op::check(const engine::Bound& b) const {
  if (b.size(sym_N) < 1)
    throw InvalidArgument(fmt::format("{}: b: its last dim (N, the state size) must be at least 1, got 0", name()));
  const int64_t h = b.size(sym_H), g = b.size(sym_G);
  if (g < 1 || h % g != 0)
    throw InvalidArgument(fmt::format("{}: b: dim 2 (G, the groups) must divide the heads H = {}, got {}", name(), h, g));
  if (b.mode < 0) return;
  if (b.size(sym_S) > INT32_MAX)
    throw InvalidArgument(fmt::format("{}: x: {} packed tokens do not fit cu_seqlens' i32 entries", name(), b.size(sym_S)));
  // Host metadata is checked here; a device's is only read by the kernels (clamped).
  if (b.tensor(cu_seqlens).device.kind == DeviceKind::cpu && !b.args->shapes_only)
    engine::check_offsets(name(), "cu_seqlens", b.tensor(cu_seqlens), b.size(sym_S));
}

int64_t Ssm2Op::longest(const engine::Bound& b) const {
  if (b.mode < 0) return b.size(sym_S);
  return engine::check_offsets(name(), "cu_seqlens", b.tensor(cu_seqlens), b.size(sym_S));
}

Ssm2Params Ssm2Op::params(const engine::Bound& b) const {
  Ssm2Params p{};
  auto tokens = [&](int t) {
    Ssm2Tokens v{};
    if (t < 0 || !b.has(t)) return v;
    v.data = b.data(t), v.sb = b.mode >= 0 ? 0 : b.stride(t, 0), v.ss = b.stride(t, 1), v.sh = b.stride(t, 2);
    return v;
  };
  auto floats = [&](int t) { return t < 0 ? nullptr : static_cast<float*>(b.data(t)); };
  p.x = tokens(x), p.dt = tokens(dt), p.B = tokens(B), p.C = tokens(C);
  p.A = floats(A), p.D = floats(D), p.h0 = floats(initial_state);
  if (b.mode >= 0) p.cu_seqlens = static_cast<const i32*>(b.data(cu_seqlens));
  p.batch = b.size(sym_B), p.seqlen = b.size(sym_S), p.heads = b.size(sym_H), p.hdim = b.size(sym_P);
  p.groups = b.size(sym_G), p.nstate = b.size(sym_N);
  if (backward) {
    p.d_y = tokens(d_y), p.dx = tokens(dx), p.ddt = tokens(ddt), p.dB = tokens(dB), p.dC = tokens(dC);
    p.dht = floats(d_final_state), p.dh0 = floats(d_initial_state), p.dA = floats(dA), p.dD = floats(dD);
  } else {
    p.y = tokens(y), p.ht = floats(final_state);
  }
  return p;
}

engine::CpuWork Ssm2Op::cpu_prepare(const engine::Bound& b, const engine::PlanData&, void* params) const {
  static_assert(sizeof(Ssm2Params) <= kParamBytes);
  Ssm2Params& p = *new (params) Ssm2Params(this->params(b));
  if (!backward) return {p.batch * p.heads};
  if (p.batch == 0) {  // no task runs: the sums over sequences are empty
    if (p.dA) std::fill_n(p.dA, p.heads, 0.0f);
    if (p.dD) std::fill_n(p.dD, p.heads, 0.0f);
    return {0};
  }
  // One task per sequence, each with a workspace of its own (the calling thread's buffer,
  // reused by its next call; it waits for the tasks), then the shares and the counter.
  const int64_t span = longest(b);
  p.chunk = ssm1_chunk(span);
  p.chunks_cap = ceil_div<int64_t>(span, p.chunk);
  thread_local std::vector<float> work;
  const int64_t per_task = ssm2_cpu_task_floats(p.heads, p.hdim, p.nstate, p.chunks_cap, p.chunk) + 2 * p.groups * p.nstate;
  const size_t tasks = size_t(p.batch * per_task);
  const size_t need = tasks + size_t(ssm2_share_floats(p.batch, p.heads)) + 1;
  if (work.size() < need) work.resize(need);
  p.work = work.data(), p.partial = p.work + tasks;
  p.done = reinterpret_cast<u32*>(p.partial + ssm2_share_floats(p.batch, p.heads));
  *p.done = 0;
  return {p.batch};
}

bool Ssm2Op::chunked(const VariantKey& key) const {
  if (key.backend != "cuda") return false;
  return ssm2_chunked(key.get_enum("dtype") != "f32", key.get_int("state"));
}

void Ssm2Op::plan_facts(const engine::PlanData& plan, void* facts) const { new (facts) Ssm2Facts{chunked(plan.key)}; }

int64_t Ssm2Op::cuda_dynamic_smem(const VariantKey& key) const {
  if (!chunked(key)) return 0;
  const int64_t n = key.get_int("state");
  return backward ? ssm2_chunk_bwd_smem(1, n) : linear_chunk_smem_bytes(n);
}

#if !EJK_HAVE_CUDA
void Ssm2Op::cuda_launch(const engine::Bound&, const engine::PlanData&, engine::CudaLaunchContext&) const {
  throw BackendUnavailable(
      fmt::format("{}: this build has no CUDA backend (configured with EJK_ENABLE_CUDA=OFF)", name()));
}
engine::OpDef::Workspace Ssm2Op::cuda_workspace(const engine::Bound&, const engine::PlanData&) const { return {}; }
#endif

void Ssm2Op::reference(const engine::Bound& b, double* const* out) const {
  Ssm2RefOut r;
  if (backward) {
    r.dx = out[dx], r.dA = out[dA], r.dB = out[dB], r.dC = out[dC], r.dD = out[dD], r.ddt = out[ddt];
    r.dh0 = out[d_initial_state];
  } else {
    r.y = out[y], r.ht = out[final_state];
  }
  reference_ssm2(params(b), b.dtype, r);
}

const Ssm2Op& state_space_v2_op() {
  static const Ssm2Op op("ssm2_fwd", false);
  return op;
}

const Ssm2Op& state_space_v2_backward_op() {
  static const Ssm2Op op("ssm2_bwd", true);
  return op;
}

EJK_REGISTER_OP(state_space_v2_op);
EJK_REGISTER_OP(state_space_v2_backward_op);

}  // namespace ejk::ops
