// state_space_v1 and state_space_v1_backward through the generic API: gate, initial and final
// states, state sizes pre-built and JIT-compiled, channels not a multiple of a tile, padded
// token-major inputs, f32/bf16/f16, the decode step in place, on the CPU and (where a GPU can
// run) on CUDA, against the float64 reference with the project's tolerances. The reference's
// gradients are checked against central finite differences of its own forward. Bad inputs
// must name the argument.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "ejk/admin.h"
#include "ejk/core/error.h"
#include "ejk/half.h"
#include "ejk/op.h"
#include "host_case.h"
#include "op_case.h"
#include "run_cmd.h"

using namespace ejk;
using Catch::Matchers::ContainsSubstring;

namespace {

struct Problem {
  DType dtype = DType::f32;
  int64_t b = 2, s = 11, d = 21, n = 16;
  bool gate = false, init = false, state = true, dht = false;
  int64_t pad = 0;           // elements between token rows beyond the last dim (inputs)
  bool token_major = false;  // inputs stored [S, Bt, X]
  std::string name() const {
    return fmt::format("{} b {} s {} d {} n {} gate {} init {} state {} dht {} pad {} tm {}", dtype_name(dtype), b, s,
                       d, n, gate, init, state, dht, pad, token_major);
  }
};

struct Buffer {
  Tensor storage;
  TensorView view;
};

constexpr int64_t kFence = 7;

// Values in `t`'s dtype (exact there) from f32 values made by `gen`.
void fill_with(Tensor& t, const std::function<float()>& gen) {
  Tensor f = Tensor::empty(t.shape(), DType::f32);
  for (int64_t i = 0; i < f.numel(); ++i) f.data_as<float>()[i] = gen();
  const Tensor r = t.dtype() == DType::f32 ? f : cli::from_f32(f, t.dtype());
  std::memcpy(t.data(), r.data(), r.nbytes());
}

// A [Bt, S, X] input: rows `pad` apart beyond X, optionally token-major.
Buffer token_input(int64_t b, int64_t s, int64_t x, const Problem& p, const std::function<float()>& gen) {
  const int64_t row = x + p.pad;
  const Dims shape{b, s, x};
  const Dims strides = p.token_major ? Dims{row, b * row, 1} : Dims{s * row, row, 1};
  Buffer buf;
  buf.storage = Tensor::empty({std::max<int64_t>(b * s * row, 1)}, p.dtype);
  fill_with(buf.storage, gen);
  buf.view = {buf.storage.data(), p.dtype, {}, shape, strides};
  return buf;
}

Buffer dense(const Dims& shape, const std::function<float()>& gen) {
  Buffer buf;
  buf.storage = Tensor::empty(shape, DType::f32);
  fill_with(buf.storage, gen);
  buf.view = buf.storage.view();
  return buf;
}

// A contiguous output poisoned with 0xff (NaN), kFence elements of fence on each side.
Buffer poisoned(const Dims& shape, DType dtype) {
  const int64_t n = TensorView{nullptr, dtype, {}, shape, contiguous_strides(shape)}.numel();
  Buffer buf;
  buf.storage = Tensor::empty({n + 2 * kFence}, dtype);
  std::memset(buf.storage.data(), 0xff, buf.storage.nbytes());
  buf.view = {static_cast<char*>(buf.storage.data()) + kFence * dtype_size(dtype), dtype, {}, shape,
              contiguous_strides(shape)};
  return buf;
}

struct Call {
  std::vector<std::pair<std::string, Buffer>> inputs, outputs;
  Args inputs_only() const {
    Args a;
    for (const auto& [name, b] : inputs) a.set(name, b.view);
    return a;
  }
  Args all() const {
    Args a = inputs_only();
    for (const auto& [name, b] : outputs) a.set(name, b.view);
    return a;
  }
};

Call make_call(const Problem& p, bool backward, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f), dt_pre(-1.0f, 0.5f);
  std::uniform_real_distribution<float> decay(0.5f, 2.0f);
  auto nrm = [&] { return normal(rng); };
  Call c;
  c.inputs.emplace_back("x", token_input(p.b, p.s, p.d, p, nrm));
  c.inputs.emplace_back("a", dense({p.d, p.n}, [&] { return -decay(rng); }));
  c.inputs.emplace_back("b", token_input(p.b, p.s, p.n, p, nrm));
  c.inputs.emplace_back("c", token_input(p.b, p.s, p.n, p, nrm));
  c.inputs.emplace_back("d", dense({p.d}, nrm));
  c.inputs.emplace_back("dt", token_input(p.b, p.s, p.d, p, [&] { return float(std::log1p(std::exp(double(dt_pre(rng))))); }));
  if (p.gate) c.inputs.emplace_back("gate", token_input(p.b, p.s, p.d, p, nrm));
  const Dims state{p.b, p.d, p.n};
  if (p.init) c.inputs.emplace_back("initial_state", dense(state, nrm));
  if (!backward) {
    c.outputs.emplace_back("y", poisoned({p.b, p.s, p.d}, p.dtype));
    if (p.state) c.outputs.emplace_back("final_state", poisoned(state, DType::f32));
    return c;
  }
  c.inputs.emplace_back("d_y", token_input(p.b, p.s, p.d, p, nrm));
  if (p.dht) c.inputs.emplace_back("d_final_state", dense(state, nrm));
  c.outputs.emplace_back("dx", poisoned({p.b, p.s, p.d}, p.dtype));
  c.outputs.emplace_back("ddt", poisoned({p.b, p.s, p.d}, p.dtype));
  // Without a gate dgate is the gradient of a gate nothing reads: zeros.
  if (p.gate || p.dht) c.outputs.emplace_back("dgate", poisoned({p.b, p.s, p.d}, p.dtype));
  c.outputs.emplace_back("db", poisoned({p.b, p.s, p.n}, p.dtype));
  c.outputs.emplace_back("dc", poisoned({p.b, p.s, p.n}, p.dtype));
  c.outputs.emplace_back("da", poisoned({p.d, p.n}, DType::f32));
  c.outputs.emplace_back("dd", poisoned({p.d}, DType::f32));
  c.outputs.emplace_back("d_initial_state", poisoned(state, DType::f32));
  return c;
}

double element(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::f32: return t.data_as<float>()[i];
    case DType::bf16: return bf16_to_float(t.data_as<uint16_t>()[i]);
    default: return f16_to_float(t.data_as<uint16_t>()[i]);
  }
}

struct Mismatch {
  double rel_l2 = 0;
  bool nonfinite = false, fence_intact = true;
};

Mismatch compare(const Tensor& host, const std::vector<double>& ref) {
  Mismatch e;
  double num = 0, den = 0;
  const int64_t n = int64_t(ref.size());
  for (int64_t i = 0; i < n; ++i) {
    const double got = element(host, kFence + i);
    if (!std::isfinite(got)) e.nonfinite = true;
    num += (got - ref[size_t(i)]) * (got - ref[size_t(i)]), den += ref[size_t(i)] * ref[size_t(i)];
  }
  const auto* bytes = static_cast<const unsigned char*>(host.data());
  const size_t es = dtype_size(host.dtype());
  for (int64_t i = 0; i < host.numel(); ++i)
    if (i < kFence || i >= kFence + n)
      for (size_t q = 0; q < es; ++q) e.fence_intact = e.fence_intact && bytes[size_t(i) * es + q] == 0xff;
  e.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return e;
}

double tolerance(DType t, bool backward) { return t == DType::f32 ? 1e-5 : backward ? 2e-2 : 1e-2; }

const char* op_name(bool backward) { return backward ? "state_space_v1_backward" : "state_space_v1"; }

const std::vector<double>& ref_values(const std::vector<ReferenceOutput>& ref, const std::string& name) {
  const auto r = std::find_if(ref.begin(), ref.end(), [&](const ReferenceOutput& x) { return x.name == name; });
  REQUIRE(r != ref.end());
  return r->values;
}

// Runs p on `device` into poisoned outputs and checks every output against the reference.
void check_problem(const Problem& p, bool backward, Device device, uint64_t seed) {
  const Call c = make_call(p, backward, seed);
  std::vector<Tensor> keep, out_dev;
  Args args;
  auto on_device = [&](const Buffer& b, std::vector<Tensor>& into) {
    if (device.kind == DeviceKind::cpu) return b.view;
    into.push_back(b.storage.to(device));
    TensorView v = b.view;
    v.device = device;
    v.data = static_cast<char*>(into.back().data()) +
             (static_cast<const char*>(b.view.data) - static_cast<const char*>(b.storage.data()));
    return v;
  };
  keep.reserve(c.inputs.size()), out_dev.reserve(c.outputs.size());
  for (const auto& [name, b] : c.inputs) args.set(name, on_device(b, keep));
  for (const auto& [name, b] : c.outputs) args.set(name, on_device(b, out_dev));
  const RunInfo info = run(op_name(backward), args);
  synchronize(device);
  const std::vector<ReferenceOutput> ref = reference(op_name(backward), c.all());
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    const auto& [name, b] = c.outputs[i];
    const Tensor host = device.kind == DeviceKind::cpu ? b.storage : out_dev[i].to(Device{});
    const Mismatch e = compare(host, ref_values(ref, name));
    INFO(fmt::format("{} {}: {} -> {}: rel_l2 {:.3e}", op_name(backward), name, p.name(), info.key, e.rel_l2));
    CHECK_FALSE(e.nonfinite);
    CHECK(e.rel_l2 <= tolerance(p.dtype, backward));
    CHECK(e.fence_intact);
  }
}

std::vector<Problem> problems(DType dtype) {
  std::vector<Problem> v;
  for (int m = 0; m < 8; ++m) {
    Problem p;
    p.dtype = dtype, p.gate = m & 1, p.init = m & 2, p.dht = m & 4, p.state = m != 5;
    if (m == 3) p.n = 5, p.d = 37;  // a JIT-compiled state size, several channel tiles
    if (m == 6) p.pad = 3, p.token_major = true;
    if (m == 7) p.s = 70, p.d = 9;  // many checkpoint chunks
    v.push_back(p);
  }
  return v;
}

Device gpu() { return {DeviceKind::cuda, 0}; }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("state_space_v1 on the CPU: gate, states, placements, f32", "[ssm1][cpu]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT (EJK_ENABLE_ORC_JIT=OFF): these keys are not built in");
  uint64_t seed = 1;
  for (const Problem& p : problems(DType::f32)) {
    check_problem(p, false, Device{}, seed++);
    check_problem(p, true, Device{}, seed++);
  }
}

TEST_CASE("state_space_v1 on the CPU: bf16 and f16", "[ssm1][cpu]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT (EJK_ENABLE_ORC_JIT=OFF): these keys are not built in");
  uint64_t seed = 100;
  for (DType t : {DType::bf16, DType::f16})
    for (const Problem& p : {problems(t)[1], problems(t)[3], problems(t)[6], problems(t)[7]}) {
      check_problem(p, false, Device{}, seed++);
      check_problem(p, true, Device{}, seed++);
    }
}

TEST_CASE("state_space_v1 on the CPU: pre-built N = 16 without a gate", "[ssm1][cpu]") {
  Problem p;  // no flags: the AOT sets build only flag-free keys
  for (DType t : {DType::f32, DType::bf16}) {
    p.dtype = t;
    for (bool backward : {false, true}) {
      const Call c = make_call(p, backward, 1);
      const std::string key = variant_key(op_name(backward), c.all());
      bool builtin = false;
      for (const OpListing& l : list_ops()) builtin = builtin || std::count(l.builtin.begin(), l.builtin.end(), key) > 0;
      if (!builtin && !cpu_jit_available()) SKIP(key << " is not built in and this build has no CPU JIT");
    }
    check_problem(p, false, Device{}, 7);
    check_problem(p, true, Device{}, 8);
  }
}

TEST_CASE("state_space_v1: empty sequences and the decode step in place", "[ssm1][cpu]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT (EJK_ENABLE_ORC_JIT=OFF): these keys are not built in");
  Problem empty;  // no tokens: final_state is initial_state, d_initial_state d_final_state
  empty.s = 0, empty.init = true, empty.dht = true, empty.gate = true;
  check_problem(empty, false, Device{}, 5);
  check_problem(empty, true, Device{}, 6);
  Problem none;  // no sequences: the parameter gradients are zeros
  none.b = 0;
  check_problem(none, true, Device{}, 9);

  Problem step;  // one token with a state, final_state written over initial_state
  step.s = 1, step.init = true, step.gate = true, step.d = 40;
  const Call c = make_call(step, false, 12);
  const std::vector<ReferenceOutput> ref = reference("state_space_v1", c.all());
  Args args = c.all();
  const TensorView h = *args.tensor("initial_state");
  args.set("final_state", h);
  run("state_space_v1", args);
  const std::vector<double>& want = ref_values(ref, "final_state");
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double got = static_cast<const float*>(h.data)[i];
    num += (got - want[i]) * (got - want[i]), den += want[i] * want[i];
  }
  CHECK(std::sqrt(num / den) <= 1e-5);
}

// The reference's gradients against central differences of its forward, in float64 on f32
// inputs: loss = sum(y * d_y) + sum(final_state * d_final_state).
TEST_CASE("the state_space_v1 reference backward matches finite differences", "[ssm1][reference]") {
  for (bool with_gate : {false, true}) {
    Problem p;
    p.b = 2, p.s = 5, p.d = 3, p.n = 4, p.init = true, p.dht = true, p.gate = with_gate;
    const Call bwd = make_call(p, true, 31 + with_gate);
    const Args bargs = bwd.all();
    const auto grads = reference("state_space_v1_backward", bargs);
    auto loss = [&] {
      Args a;
      for (const auto& [name, b] : bwd.inputs)
        if (name != "d_y" && name != "d_final_state") a.set(name, b.view);
      const auto out = reference("state_space_v1", a);
      double l = 0;
      for (const auto& r : out) {
        const TensorView* w = bargs.tensor(r.name == "y" ? "d_y" : "d_final_state");
        for (size_t i = 0; i < r.values.size(); ++i) l += r.values[i] * double(static_cast<const float*>(w->data)[i]);
      }
      return l;
    };
    const std::vector<std::pair<std::string, std::string>> pairs = {
        {"x", "dx"}, {"a", "da"}, {"b", "db"}, {"c", "dc"}, {"d", "dd"}, {"dt", "ddt"}, {"gate", "dgate"},
        {"initial_state", "d_initial_state"}};
    for (const auto& [in, grad] : pairs) {
      if (in == "gate" && !with_gate) continue;
      const TensorView* x = bargs.tensor(in);
      const std::vector<double>& analytic = ref_values(grads, grad);
      double num = 0, den = 0;
      for (size_t i = 0; i < analytic.size(); ++i) {
        float* e = static_cast<float*>(x->data) + i;  // every input here is contiguous
        const float saved = *e, step = 1.0f / 512;
        *e = saved + step;
        const double up = loss(), h_up = double(*e);
        *e = saved - step;
        const double down = loss(), h_down = double(*e);
        *e = saved;
        const double fd = (up - down) / (h_up - h_down);
        num += (fd - analytic[i]) * (fd - analytic[i]), den += analytic[i] * analytic[i];
      }
      INFO(fmt::format("gate {} {}: rel_l2 {:.3e}", with_gate, grad, std::sqrt(num / den)));
      CHECK(den > 0);
      CHECK(std::sqrt(num / den) < 1e-5);
    }
  }
}

TEST_CASE("bad state_space_v1 input names the argument", "[ssm1][errors]") {
  Problem p;
  p.gate = true, p.init = true;
  const Call c = make_call(p, false, 5);
  auto with = [&](const char* name, const TensorView& t) {
    Args a = c.all();
    a.set(name, t);
    return error_of([&] { run("state_space_v1", a); });
  };
  const Tensor b_bad = Tensor::empty({p.b, p.s, p.n + 1}, DType::f32);
  CHECK_THAT(with("b", b_bad.view()), ContainsSubstring("b: dim 2 (N)"));
  const Tensor d_bad = Tensor::empty({p.d - 1}, DType::f32);
  CHECK_THAT(with("d", d_bad.view()), ContainsSubstring("d: dim 0 (Dm)"));
  const Tensor c_bad = Tensor::empty({p.b, p.s + 1, p.n}, DType::f32);
  CHECK_THAT(with("c", c_bad.view()), ContainsSubstring("c: dim 1 (S)"));
  const Tensor d16 = Tensor::empty({p.d}, DType::bf16);
  CHECK_THAT(with("d", d16.view()), ContainsSubstring("d"));
  const Tensor gate16 = Tensor::empty({p.b, p.s, p.d}, DType::bf16);
  CHECK_THAT(with("gate", gate16.view()), ContainsSubstring("gate"));
  const Tensor state = Tensor::empty({p.b, p.d + 1, p.n}, DType::f32);
  CHECK_THAT(with("initial_state", state.view()), ContainsSubstring("initial_state"));
  Problem zp;
  zp.n = 0, zp.state = false;
  const Call zc = make_call(zp, false, 8);
  CHECK_THAT(error_of([&] { run("state_space_v1", zc.all()); }), ContainsSubstring("must be at least 1"));
  const Call bc = make_call(Problem{}, true, 7);
  Args b = bc.all();
  const Tensor dy_bad = Tensor::empty({2, 12, 21}, DType::f32);
  b.set("d_y", dy_bad.view());
  CHECK_THAT(error_of([&] { run("state_space_v1_backward", b); }), ContainsSubstring("d_y: dim 1 (S)"));
}

TEST_CASE("the CLI cases of state_space_v1 make problems that check", "[ssm1][cli]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT (EJK_ENABLE_ORC_JIT=OFF): the cases' keys are not built in");
  const std::vector<std::vector<std::string>> option_sets = {
      {"--s", "20", "--d", "40"}, {"--s", "9", "--d", "17", "--n", "3", "--gate", "--init", "--b", "3"}};
  for (bool backward : {false, true}) {
    cli::OpCase* oc = nullptr;
    for (cli::OpCase* c : cli::op_cases()) if (std::string(c->op()) == op_name(backward)) oc = c;
    REQUIRE(oc != nullptr);
    for (std::vector<std::string> opts : option_sets) {
      if (backward) opts.push_back("--dht");
      cli::ProblemParser(*oc).parse(opts);
      cli::HostCase hc;
      hc.op = oc->op();
      std::mt19937_64 rng(3);
      for (const cli::InputSpec& in : oc->inputs(DType::f32)) {
        Tensor t = Tensor::empty(in.shape, in.dtype);
        oc->fill(in.name, t, rng);
        hc.inputs.emplace_back(in.name, std::move(t));
      }
      Args args = hc.args();
      std::vector<std::pair<std::string, Tensor>> outs;
      for (const OutputSpec& o : output_specs(oc->op(), args)) outs.emplace_back(o.name, Tensor::empty(o.shape, o.dtype));
      for (auto& [name, t] : outs) {
        std::memset(t.data(), 0xff, t.nbytes());
        args.set(name, t.view());
      }
      run(oc->op(), args);
      const auto ref = reference(oc->op(), hc.args());
      for (const auto& [name, t] : outs) {
        const std::vector<double>& want = ref_values(ref, name);
        double num = 0, den = 0;
        bool finite = true;
        for (size_t i = 0; i < want.size(); ++i) {
          const double got = t.data_as<float>()[i];
          finite = finite && std::isfinite(got);
          num += (got - want[i]) * (got - want[i]), den += want[i] * want[i];
        }
        const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);  // dgate without a gate: zeros
        INFO(fmt::format("{} {}: rel_l2 {:.3e}", oc->op(), name, rel));
        CHECK(finite);
        CHECK(rel <= 1e-5);
      }
    }
  }
}

TEST_CASE("state_space_v1 on CUDA matches the float64 reference", "[ssm1][cuda][gpu]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  uint64_t seed = 500;
  for (DType t : {DType::f32, DType::bf16})
    for (const Problem& p : problems(t)) {
      check_problem(p, false, gpu(), seed++);
      check_problem(p, true, gpu(), seed++);
    }
  Problem big;  // the pre-built key, several channel tiles and many chunks
  big.dtype = DType::bf16, big.b = 2, big.s = 300, big.d = 300, big.gate = true, big.init = true, big.dht = true;
  check_problem(big, false, gpu(), seed++);
  check_problem(big, true, gpu(), seed++);
  Problem none;
  none.b = 0;
  check_problem(none, true, gpu(), seed++);
}
