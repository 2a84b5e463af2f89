#include "ops/state_space_v1/ssm1_op.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <new>
#include <vector>

#include "ejk/core/error.h"
#include "engine/metadata.h"
#include "ops/state_space_v1/ssm1_reference.h"

namespace ejk::ops {

Ssm1Op::Ssm1Op(std::string_view kernel_op, bool backward)
    : OpDef(kernel_op), backward(backward), x(tensor("x")), A(tensor("a")), B(tensor("b")), C(tensor("c")),
      D(tensor("d")), dt(tensor("dt")), gate(tensor("gate")), initial_state(tensor("initial_state")),
      cu_seqlens(tensor("cu_seqlens")), y(backward ? -1 : tensor("y")), final_state(backward ? -1 : tensor("final_state")),
      d_y(backward ? tensor("d_y") : -1), d_final_state(backward ? tensor("d_final_state") : -1),
      dx(backward ? tensor("dx") : -1), dA(backward ? tensor("da") : -1), dB(backward ? tensor("db") : -1),
      dC(backward ? tensor("dc") : -1), dD(backward ? tensor("dd") : -1), ddt(backward ? tensor("ddt") : -1),
      dgate(backward ? tensor("dgate") : -1), d_initial_state(backward ? tensor("d_initial_state") : -1),
      sym_B(symbol("Bt")), sym_S(symbol("S")), sym_D(symbol("Dm")), sym_N(symbol("N")) {}

void Ssm1Op::check(const engine::Bound& b) const {
  if (b.size(sym_N) < 1)
    throw InvalidArgument(fmt::format("{}: A: its last dim (N, the state size) must be at least 1, got 0", name()));
  if (b.mode < 0) return;
  if (b.size(sym_S) > INT32_MAX)
    throw InvalidArgument(fmt::format("{}: x: {} packed tokens do not fit cu_seqlens' i32 entries", name(), b.size(sym_S)));
  // Host metadata is checked here; a device's is only read by the kernels (clamped).
  if (b.tensor(cu_seqlens).device.kind == DeviceKind::cpu && !b.args->shapes_only)
    engine::check_offsets(name(), "cu_seqlens", b.tensor(cu_seqlens), b.size(sym_S));
}

int64_t Ssm1Op::longest(const engine::Bound& b) const {
  if (b.mode < 0) return b.size(sym_S);
  return engine::check_offsets(name(), "cu_seqlens", b.tensor(cu_seqlens), b.size(sym_S));
}

Ssm1Params Ssm1Op::params(const engine::Bound& b) const {
  Ssm1Params p{};
  auto tokens = [&](int t) {
    Ssm1Tokens v{};
    if (t < 0 || !b.has(t)) return v;
    v.data = b.data(t), v.sb = b.mode >= 0 ? 0 : b.stride(t, 0), v.ss = b.stride(t, 1);
    return v;
  };
  auto floats = [&](int t) { return t < 0 ? nullptr : static_cast<float*>(b.data(t)); };
  p.x = tokens(x), p.dt = tokens(dt), p.B = tokens(B), p.C = tokens(C), p.gate = tokens(gate);
  p.A = floats(A), p.D = floats(D), p.h0 = floats(initial_state);
  if (b.mode >= 0) p.cu_seqlens = static_cast<const i32*>(b.data(cu_seqlens));
  p.batch = b.size(sym_B), p.seqlen = b.size(sym_S), p.dim = b.size(sym_D), p.nstate = b.size(sym_N);
  if (backward) {
    p.d_y = tokens(d_y), p.dx = tokens(dx), p.ddt = tokens(ddt), p.dB = tokens(dB), p.dC = tokens(dC);
    p.dgate = tokens(dgate);
    p.dht = floats(d_final_state), p.dh0 = floats(d_initial_state), p.dA = floats(dA), p.dD = floats(dD);
  } else {
    p.y = tokens(y), p.ht = floats(final_state);
  }
  return p;
}

int64_t ssm1_chunk(int64_t seqlen) {
  return std::max<int64_t>(1, int64_t(std::ceil(std::sqrt(double(std::max<int64_t>(seqlen, 1))))));
}

engine::CpuWork Ssm1Op::cpu_prepare(const engine::Bound& b, const engine::PlanData&, void* params) const {
  static_assert(sizeof(Ssm1Params) <= kParamBytes);
  Ssm1Params& p = *new (params) Ssm1Params(this->params(b));
  if (!backward) {
    p.tiles = ceil_div<int64_t>(p.dim, kSsm1CpuChannels);
    return {p.batch * p.tiles};
  }
  if (p.batch == 0) {  // no task runs: the sums over sequences are empty
    if (p.dA) std::fill_n(p.dA, p.dim * p.nstate, 0.0f);
    if (p.dD) std::fill_n(p.dD, p.dim, 0.0f);
    return {0};
  }
  // One task per sequence, each with a workspace of its own (the calling thread's buffer,
  // reused by its next call; it waits for the tasks), then the shares and the counter.
  const int64_t span = longest(b);
  p.chunk = ssm1_chunk(span);
  p.chunks_cap = ceil_div<int64_t>(span, p.chunk);
  thread_local std::vector<float> work;
  const size_t tasks = size_t(p.batch * ssm1_cpu_task_floats(p.dim, p.nstate, p.chunks_cap, p.chunk));
  const size_t need = tasks + size_t(ssm1_share_floats(p.batch, p.dim, p.nstate)) + 1;
  if (work.size() < need) work.resize(need);
  p.work = work.data(), p.partial = p.work + tasks;
  p.done = reinterpret_cast<u32*>(p.partial + ssm1_share_floats(p.batch, p.dim, p.nstate));
  *p.done = 0;
  return {p.batch};
}

#if !EJK_HAVE_CUDA
void Ssm1Op::cuda_launch(const engine::Bound&, const engine::PlanData&, engine::CudaLaunchContext&) const {
  throw BackendUnavailable(
      fmt::format("{}: this build has no CUDA backend (configured with EJK_ENABLE_CUDA=OFF)", name()));
}
engine::OpDef::Workspace Ssm1Op::cuda_workspace(const engine::Bound&, const engine::PlanData&) const { return {}; }
#endif

void Ssm1Op::reference(const engine::Bound& b, double* const* out) const {
  Ssm1RefOut r;
  if (backward) {
    r.dx = out[dx], r.dA = out[dA], r.dB = out[dB], r.dC = out[dC], r.dD = out[dD], r.ddt = out[ddt];
    r.dgate = out[dgate], r.dh0 = out[d_initial_state];
  } else {
    r.y = out[y], r.ht = out[final_state];
  }
  reference_ssm1(params(b), b.dtype, r);
}

const Ssm1Op& state_space_v1_op() {
  static const Ssm1Op op("ssm1_fwd", false);
  return op;
}

const Ssm1Op& state_space_v1_backward_op() {
  static const Ssm1Op op("ssm1_bwd", true);
  return op;
}

EJK_REGISTER_OP(state_space_v1_op);
EJK_REGISTER_OP(state_space_v1_backward_op);

}  // namespace ejk::ops
