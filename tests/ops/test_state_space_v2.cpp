// state_space_v2 and state_space_v2_backward through the generic API: groups, initial and final
// states, state sizes pre-built and JIT-compiled, padded token-major inputs, f32/bf16/f16, the
// decode step in place, on the CPU and (where a GPU can run) on CUDA, against the float64
// reference with the project's tolerances. The reference's gradients are checked against central
// finite differences of its own forward. Bad inputs must name the argument.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
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

using namespace ejk;
using Catch::Matchers::ContainsSubstring;

namespace {

struct Problem {
  DType dtype = DType::f32;
  int64_t b = 2, s = 11, h = 4, p = 6, g = 2, n = 128;
  bool init = false, state = true, dht = false;
  int64_t pad = 0;           // elements between rows beyond the last dim (inputs)
  bool token_major = false;  // inputs stored [S, Bt, ...]
  std::string name() const {
    return fmt::format("{} b {} s {} h {} p {} g {} n {} init {} state {} dht {} pad {} tm {}", dtype_name(dtype), b, s,
                       h, p, g, n, init, state, dht, pad, token_major);
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

// A [Bt, S, K, X] input (X = 0: [Bt, S, K]): rows `pad` apart beyond X, optionally token-major.
Buffer token_input(int64_t b, int64_t s, int64_t k, int64_t x, const Problem& p, const std::function<float()>& gen) {
  const int64_t row = x > 0 ? x + p.pad : 1, tok = x > 0 ? k * row : k + p.pad;
  Dims shape{b, s, k}, strides = p.token_major ? Dims{tok, b * tok, row} : Dims{s * tok, tok, row};
  if (x > 0) shape.push_back(x), strides.push_back(1);
  Buffer buf;
  buf.storage = Tensor::empty({std::max<int64_t>(b * s * tok, 1)}, p.dtype);
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
  c.inputs.emplace_back("x", token_input(p.b, p.s, p.h, p.p, p, nrm));
  c.inputs.emplace_back("a", dense({p.h}, [&] { return -decay(rng); }));
  c.inputs.emplace_back("b", token_input(p.b, p.s, p.g, p.n, p, nrm));
  c.inputs.emplace_back("c", token_input(p.b, p.s, p.g, p.n, p, nrm));
  c.inputs.emplace_back("d", dense({p.h}, nrm));
  c.inputs.emplace_back("dt", token_input(p.b, p.s, p.h, 0, p, [&] { return float(std::log1p(std::exp(double(dt_pre(rng))))); }));
  const Dims state{p.b, p.h, p.p, p.n};
  if (p.init) c.inputs.emplace_back("initial_state", dense(state, nrm));
  if (!backward) {
    c.outputs.emplace_back("y", poisoned({p.b, p.s, p.h, p.p}, p.dtype));
    if (p.state) c.outputs.emplace_back("final_state", poisoned(state, DType::f32));
    return c;
  }
  c.inputs.emplace_back("d_y", token_input(p.b, p.s, p.h, p.p, p, nrm));
  if (p.dht) c.inputs.emplace_back("d_final_state", dense(state, nrm));
  c.outputs.emplace_back("dx", poisoned({p.b, p.s, p.h, p.p}, p.dtype));
  c.outputs.emplace_back("ddt", poisoned({p.b, p.s, p.h}, p.dtype));
  c.outputs.emplace_back("db", poisoned({p.b, p.s, p.g, p.n}, p.dtype));
  c.outputs.emplace_back("dc", poisoned({p.b, p.s, p.g, p.n}, p.dtype));
  c.outputs.emplace_back("da", poisoned({p.h}, DType::f32));
  c.outputs.emplace_back("dd", poisoned({p.h}, DType::f32));
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

const char* op_name(bool backward) { return backward ? "state_space_v2_backward" : "state_space_v2"; }

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
  for (int m = 0; m < 6; ++m) {
    Problem p;
    p.dtype = dtype, p.init = m & 1, p.dht = m & 2, p.state = m != 5;
    if (m == 1) p.n = 5, p.g = 1;              // a JIT-compiled state size, one group
    if (m == 2) p.pad = 3, p.token_major = true, p.g = 4;
    if (m == 3) p.s = 60, p.n = 7, p.h = 2, p.p = 130, p.g = 1;  // many chunks, two head-dim tiles on CUDA
    v.push_back(p);
  }
  return v;
}

// The chunked SSD keys' matrix (16-bit, N 128 and 64): chunk edges, head dims that leave a
// partial 32-column tile or are not a multiple of 8, groups, padded token-major inputs; the
// forward varies whether states are returned, the backward whether dht is given.
std::vector<Problem> chunked_problems(bool backward) {
  std::vector<Problem> v;
  int m = 0;
  for (DType t : {DType::bf16, DType::f16})
    for (int64_t n : {128, 64})
      for (int64_t s : {1, 63, 64, 65, 1000}) {
        Problem p;
        p.dtype = t, p.n = n, p.s = s, p.b = 2, p.h = 4;
        p.p = std::array<int64_t, 4>{64, 20, 130, 32}[size_t(m % 4)];
        p.g = std::array<int64_t, 3>{1, 2, 4}[size_t(m % 3)];
        p.init = m % 2 == 0;
        if (backward) p.dht = m % 3 != 1;
        else p.state = m % 5 != 3;
        if (m % 7 == 2) p.pad = 3, p.token_major = true;
        ++m;
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

TEST_CASE("state_space_v2 on the CPU: groups, states, placements, f32", "[ssm2][cpu]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT (EJK_ENABLE_ORC_JIT=OFF): these keys are not built in");
  uint64_t seed = 1;
  for (const Problem& p : problems(DType::f32)) {
    check_problem(p, false, Device{}, seed++);
    check_problem(p, true, Device{}, seed++);
  }
}

TEST_CASE("state_space_v2 on the CPU: bf16 and f16", "[ssm2][cpu]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT (EJK_ENABLE_ORC_JIT=OFF): these keys are not built in");
  uint64_t seed = 100;
  for (DType t : {DType::bf16, DType::f16})
    for (const Problem& p : {problems(t)[0], problems(t)[2]}) {
      check_problem(p, false, Device{}, seed++);
      check_problem(p, true, Device{}, seed++);
    }
}

TEST_CASE("state_space_v2: empty sequences and the decode step in place", "[ssm2][cpu]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT (EJK_ENABLE_ORC_JIT=OFF): these keys are not built in");
  Problem empty;  // no tokens: final_state is initial_state, d_initial_state d_final_state
  empty.s = 0, empty.init = true, empty.dht = true, empty.n = 4;
  check_problem(empty, false, Device{}, 5);
  check_problem(empty, true, Device{}, 6);
  Problem none;  // no sequences: the parameter gradients are zeros
  none.b = 0, none.n = 4;
  check_problem(none, true, Device{}, 9);

  Problem step;  // one token with a state, final_state written over initial_state
  step.s = 1, step.init = true;
  const Call c = make_call(step, false, 12);
  const std::vector<ReferenceOutput> ref = reference("state_space_v2", c.all());
  Args args = c.all();
  const TensorView h = *args.tensor("initial_state");
  args.set("final_state", h);
  run("state_space_v2", args);
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
TEST_CASE("the state_space_v2 reference backward matches finite differences", "[ssm2][reference]") {
  Problem p;
  p.b = 2, p.s = 5, p.h = 4, p.p = 2, p.g = 2, p.n = 3, p.init = true, p.dht = true;
  const Call bwd = make_call(p, true, 31);
  const Args bargs = bwd.all();
  const auto grads = reference("state_space_v2_backward", bargs);
  auto loss = [&] {
    Args a;
    for (const auto& [name, b] : bwd.inputs)
      if (name != "d_y" && name != "d_final_state") a.set(name, b.view);
    const auto out = reference("state_space_v2", a);
    double l = 0;
    for (const auto& r : out) {
      const TensorView* w = bargs.tensor(r.name == "y" ? "d_y" : "d_final_state");
      for (size_t i = 0; i < r.values.size(); ++i) l += r.values[i] * double(static_cast<const float*>(w->data)[i]);
    }
    return l;
  };
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"x", "dx"}, {"a", "da"}, {"b", "db"}, {"c", "dc"}, {"d", "dd"}, {"dt", "ddt"}, {"initial_state", "d_initial_state"}};
  for (const auto& [in, grad] : pairs) {
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
    INFO(fmt::format("{}: rel_l2 {:.3e}", grad, std::sqrt(num / den)));
    CHECK(den > 0);
    CHECK(std::sqrt(num / den) < 1e-5);
  }
}

TEST_CASE("bad state_space_v2 input names the argument", "[ssm2][errors]") {
  Problem p;
  p.init = true, p.n = 4;
  const Call c = make_call(p, false, 5);
  auto with = [&](const char* name, const TensorView& t) {
    Args a = c.all();
    a.set(name, t);
    return error_of([&] { run("state_space_v2", a); });
  };
  const Tensor c_bad = Tensor::empty({p.b, p.s, p.g, p.n + 1}, DType::f32);
  CHECK_THAT(with("c", c_bad.view()), ContainsSubstring("c: dim 3 (N)"));
  const Tensor a_bad = Tensor::empty({p.h + 1}, DType::f32);
  CHECK_THAT(with("a", a_bad.view()), ContainsSubstring("(H)"));
  const Tensor dt_bad = Tensor::empty({p.b, p.s, p.h - 1}, DType::f32);
  CHECK_THAT(with("dt", dt_bad.view()), ContainsSubstring("dt: dim 2 (H)"));
  Problem gp;
  gp.g = 3, gp.n = 4;  // 4 heads in 3 groups
  CHECK_THAT(error_of([&] { run("state_space_v2", make_call(gp, false, 6).all()); }),
             ContainsSubstring("G, the groups) must divide the heads H = 4, got 3"));
}

TEST_CASE("state_space_v2 on CUDA matches the float64 reference", "[ssm2][cuda][gpu]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  uint64_t seed = 500;
  for (DType t : {DType::f32, DType::bf16})
    for (const Problem& p : problems(t)) {
      check_problem(p, false, gpu(), seed++);
      check_problem(p, true, gpu(), seed++);
    }
  Problem big;  // the pre-built key, many chunks
  big.dtype = DType::bf16, big.b = 2, big.s = 300, big.h = 8, big.p = 64, big.g = 2, big.init = true, big.dht = true;
  check_problem(big, false, gpu(), seed++);
  check_problem(big, true, gpu(), seed++);
  Problem none;
  none.b = 0, none.n = 4;
  check_problem(none, true, gpu(), seed++);
}

// The 16-bit keys with N 64 or 128 run chunked SSD on tensor cores (cuda/ssm2_chunk.cuh): chunk
// edges, head dims that leave a partial 32-column tile or are not a multiple of 8 (plain loads),
// groups, padded token-major inputs, with and without states, and the decode step in place.
TEST_CASE("state_space_v2 chunked SSD on CUDA matches the float64 reference", "[ssm2][cuda][gpu]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  uint64_t seed = 800;
  for (const Problem& p : chunked_problems(false)) check_problem(p, false, gpu(), seed++);
  Problem step;  // one token, final_state over initial_state
  step.dtype = DType::bf16, step.s = 1, step.init = true, step.p = 64;
  const Call c = make_call(step, false, seed++);
  const std::vector<ReferenceOutput> ref = reference("state_space_v2", c.all());
  std::vector<Tensor> keep;
  Args args;
  for (const auto& [name, b] : c.inputs) {
    keep.push_back(b.storage.to(gpu()));
    TensorView v = b.view;
    v.device = gpu();
    v.data = static_cast<char*>(keep.back().data()) +
             (static_cast<const char*>(b.view.data) - static_cast<const char*>(b.storage.data()));
    args.set(name, v);
    if (name == "initial_state") args.set("final_state", v);
  }
  const size_t y_at = keep.size();
  keep.push_back(c.outputs[0].second.storage.to(gpu()));
  TensorView y = c.outputs[0].second.view;
  y.device = gpu();
  y.data = static_cast<char*>(keep.back().data()) + kFence * dtype_size(y.dtype);
  args.set("y", y);
  const RunInfo info = run("state_space_v2", args);
  synchronize(gpu());
  INFO(info.key);
  const auto state = std::find_if(c.inputs.begin(), c.inputs.end(), [](const auto& x) { return x.first == "initial_state"; });
  REQUIRE(state != c.inputs.end());
  const Tensor h = keep[size_t(state - c.inputs.begin())].to(Device{});
  const std::vector<double>& want = ref_values(ref, "final_state");
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double got = h.data_as<float>()[i];
    num += (got - want[i]) * (got - want[i]), den += want[i] * want[i];
  }
  CHECK(std::sqrt(num / den) <= 1e-2);
  const Mismatch e = compare(keep[y_at].to(Device{}), ref_values(ref, "y"));
  CHECK_FALSE(e.nonfinite);
  CHECK(e.rel_l2 <= 1e-2);
  CHECK(e.fence_intact);
}

// The backward of the same keys runs chunked SSD too (cuda/ssm2_chunk_bwd.cuh): every gradient
// over chunk edges, partial head-dim tiles, groups, padded token-major inputs, with and without
// states, and long sequences (S = 4096: 64 chunks of carried state gradient).
TEST_CASE("state_space_v2 chunked SSD backward on CUDA matches the float64 reference", "[ssm2][cuda][gpu][backward]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  uint64_t seed = 1300;
  for (const Problem& p : chunked_problems(true)) check_problem(p, true, gpu(), seed++);
  for (int64_t n : {128, 64}) {
    Problem p;
    p.dtype = n == 128 ? DType::bf16 : DType::f16, p.n = n, p.s = 4096, p.b = 1, p.h = 4, p.p = 64, p.g = 2;
    p.init = p.dht = true;
    check_problem(p, true, gpu(), seed++);
  }
}
