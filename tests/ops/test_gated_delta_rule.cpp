// gated_delta_rule and gated_delta_rule_backward through the generic API: with and without the
// decay, segment ids, the L2 normalization, initial and final states, padded inputs, f32/bf16/
// f16, on the CPU and (where a GPU can run) on CUDA, against the float64 reference with the project's tolerances. The reference's
// gradients are checked against central finite differences of its own forward. Bad inputs
// must name the argument.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <fmt/ranges.h>

#include <functional>

#include "ejk/admin.h"
#include "ejk/core/error.h"
#include "op_case.h"
#include "run_cmd.h"
#include "recurrent_problem.h"  // buffers, poisoning and comparison

using namespace ejk;
using namespace recurrent_test;
using Catch::Matchers::ContainsSubstring;

namespace {

const char* op_name(bool backward) { return backward ? "gated_delta_rule_backward" : "gated_delta_rule"; }

struct DeltaProblem {
  DType dtype = DType::f32;
  int64_t b = 2, t = 9, h = 2, k = 8, v = 20;
  bool decay = true, segments = false, init = false, state = true, dht = false, l2norm = true;
  int64_t pad = 0;  // elements between q/k/v rows beyond the last dim
  // Segments: 0 a new one after each token with probability 1/4; 1 new ones at every multiple
  // of 64 (the CUDA chunks' edges) and 30 tokens into each chunk.
  int seg_mode = 0;
  double k_scale = 1;  // multiplies k (without the L2 norm, 1/sqrt(K) keeps the state bounded)
  int64_t chunk = 0;   // the forward's tokens per chunk (0: the heuristic's choice)
  std::string name() const {
    return fmt::format("{} b {} t {} h {} k {} v {} decay {} seg {}/{} init {} state {} dht {} l2 {} pad {} chunk {}",
                       dtype_name(dtype), b, t, h, k, v, decay, segments, seg_mode, init, state, dht, l2norm, pad,
                       chunk);
  }
};

// beta in (0, 1): a sigmoid of normal values, in the buffer's dtype.
void to_sigmoid(Buffer& b) {
  Tensor f = Tensor::empty(b.storage.shape(), DType::f32);
  for (int64_t i = 0; i < f.numel(); ++i) f.data_as<float>()[i] = float(1.0 / (1.0 + std::exp(-element(b.storage, i))));
  const Tensor r = b.storage.dtype() == DType::f32 ? f : cli::from_f32(f, b.storage.dtype());
  std::memcpy(b.storage.data(), r.data(), r.nbytes());
}

void scale_values(Buffer& b, double s) {
  Tensor f = Tensor::empty(b.storage.shape(), DType::f32);
  for (int64_t i = 0; i < f.numel(); ++i) f.data_as<float>()[i] = float(s * element(b.storage, i));
  const Tensor r = b.storage.dtype() == DType::f32 ? f : cli::from_f32(f, b.storage.dtype());
  std::memcpy(b.storage.data(), r.data(), r.nbytes());
}

int32_t next_segment(const DeltaProblem& p, int64_t i, std::mt19937_64& rng) {
  if (i == 0) return 0;
  if (p.seg_mode == 1) return i % 64 == 0 || i % 64 == 30;
  return rng() % 4 == 0;
}

Call make_delta_call(const DeltaProblem& p, bool backward, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Call c;
  auto input = [&](const char* name, int64_t x) {
    c.inputs.emplace_back(name, token_input({p.b, p.t, p.h, x}, p.dtype, p.pad, false, rng, false));
  };
  input("q", p.k), input("k", p.k), input("v", p.v);
  if (p.k_scale != 1) scale_values(c.inputs[1].second, p.k_scale);
  Buffer beta = token_input({p.b, p.t, p.h}, p.dtype, 0, false, rng, false);
  to_sigmoid(beta);
  c.inputs.emplace_back("beta", beta);
  if (p.decay) c.inputs.emplace_back("decay", token_input({p.b, p.t, p.h}, p.dtype, 0, false, rng, true));
  if (p.segments) {
    Buffer s;
    s.storage = Tensor::empty({p.b, p.t}, DType::i32);
    for (int64_t r = 0; r < p.b; ++r) {
      int32_t id = 0;
      for (int64_t i = 0; i < p.t; ++i) s.storage.data_as<int32_t>()[r * p.t + i] = id += next_segment(p, i, rng);
    }
    s.view = s.storage.view();
    c.inputs.emplace_back("seg_ids", s);
  }
  const Dims state{p.b, p.h, p.k, p.v};
  auto state_input = [&](const char* name) {
    Buffer b;
    b.storage = Tensor::empty(state, DType::f32);
    cli::fill_normal(b.storage, rng);
    b.view = b.storage.view();
    c.inputs.emplace_back(name, b);
  };
  if (p.init) state_input("initial_state");
  if (!backward) {
    c.outputs.emplace_back("o", poisoned({p.b, p.t, p.h, p.v}, p.dtype));
    if (p.state) c.outputs.emplace_back("final_state", poisoned(state, DType::f32));
    return c;
  }
  input("d_o", p.v);
  if (p.dht) state_input("d_final_state");
  c.outputs.emplace_back("dq", poisoned({p.b, p.t, p.h, p.k}, p.dtype));
  c.outputs.emplace_back("dk", poisoned({p.b, p.t, p.h, p.k}, p.dtype));
  c.outputs.emplace_back("dv", poisoned({p.b, p.t, p.h, p.v}, p.dtype));
  c.outputs.emplace_back("dbeta", poisoned({p.b, p.t, p.h}, p.dtype));
  c.outputs.emplace_back("ddecay", poisoned({p.b, p.t, p.h}, p.dtype));
  c.outputs.emplace_back("d_initial_state", poisoned(state, DType::f32));
  return c;
}

Args with_scalars(Args a, const DeltaProblem& p) {
  if (!p.l2norm) a.set("use_qk_l2norm", false);
  return a;
}

// The run's arguments: the scalars and, in the forward, the chunk when the problem fixes it.
Args run_args(Args a, const DeltaProblem& p, bool backward) {
  a = with_scalars(std::move(a), p);
  if (!backward && p.chunk != 0) a.tune("chunk", p.chunk);
  return a;
}

// Runs p on `device` into poisoned outputs and checks every output against the reference;
// returns the variant key that ran.
std::string check_problem(const DeltaProblem& p, bool backward, uint64_t seed, Device device = Device{}) {
  const Call c = make_delta_call(p, backward, seed);
  std::vector<Tensor> keep;  // device copies of the buffers, in c.inputs then c.outputs order
  auto on_device = [&](const Buffer& b) {
    if (device.kind == DeviceKind::cpu) return b.view;
    keep.push_back(b.storage.to(device));
    TensorView v = b.view;
    v.device = device;
    v.data = static_cast<char*>(keep.back().data()) +
             (static_cast<const char*>(b.view.data) - static_cast<const char*>(b.storage.data()));
    return v;
  };
  Args args;
  for (const auto& [name, b] : c.inputs) args.set(name, on_device(b));
  for (const auto& [name, b] : c.outputs) args.set(name, on_device(b));
  args = run_args(args, p, backward);
  const RunInfo info = run(op_name(backward), args);
  if (p.chunk != 0 && !backward) CHECK_THAT(info.key, ContainsSubstring(fmt::format(".c{}", p.chunk)));
  synchronize(device);
  const std::vector<ReferenceOutput> ref = reference(op_name(backward), with_scalars(c.all(false), p));
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    const auto& [name, b] = c.outputs[i];
    const Tensor host =
        device.kind == DeviceKind::cpu ? b.storage : keep[c.inputs.size() + i].to(Device{});
    const auto r = std::find_if(ref.begin(), ref.end(), [&](const ReferenceOutput& x) { return x.name == name; });
    REQUIRE(r != ref.end());
    const Mismatch e = compare(b, host, r->values);
    INFO(fmt::format("{} {}: {} -> {}: rel_l2 {:.3e}", op_name(backward), name, p.name(), info.key, e.rel_l2));
    CHECK_FALSE(e.nonfinite);
    CHECK(e.rel_l2 <= tolerance(p.dtype, backward));
    CHECK(e.fence_intact);
  }
  return info.key;
}

std::vector<DeltaProblem> problems(DType dtype) {
  std::vector<DeltaProblem> v;
  for (int i = 0; i < 8; ++i) {
    DeltaProblem p;
    p.dtype = dtype, p.decay = i % 2 == 0, p.segments = i % 4 >= 2, p.init = i >= 4, p.dht = i % 3 == 0;
    p.l2norm = i != 5, p.state = i != 6, p.pad = i % 3;
    v.push_back(p);
  }
  DeltaProblem big;  // several column tiles, a longer sequence (many checkpoint chunks)
  big.dtype = dtype, big.b = 1, big.t = 150, big.h = 1, big.k = 24, big.v = 40, big.segments = true, big.init = true;
  big.dht = true;
  v.push_back(big);
  return v;
}

}  // namespace

TEST_CASE("gated delta rule on the CPU: f32, bf16, f16", "[delta][cpu]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT (EJK_ENABLE_ORC_JIT=OFF): these sizes are not built in");
  uint64_t seed = 1;
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (const DeltaProblem& p : problems(t)) {
      check_problem(p, false, seed++);
      check_problem(p, true, seed++);
    }
}

TEST_CASE("gated delta rule on the CPU: pre-built sizes K = V = 128", "[delta][cpu]") {
  DeltaProblem p;
  p.k = p.v = 128, p.t = 40, p.init = true, p.dht = true;
  for (DType t : {DType::f32, DType::bf16}) {
    p.dtype = t;
    for (bool backward : {false, true}) {
      const std::string key = variant_key(op_name(backward), make_delta_call(p, backward, 1).all(false));
      bool builtin = false;
      for (const OpListing& l : list_ops()) builtin = builtin || std::count(l.builtin.begin(), l.builtin.end(), key) > 0;
      if (!builtin && !cpu_jit_available()) SKIP(key << " is not built in and this build has no CPU JIT");
    }
    check_problem(p, false, 7);
    check_problem(p, true, 8);
  }
}

TEST_CASE("gated delta rule: no tokens pass the state through", "[delta][cpu]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT (EJK_ENABLE_ORC_JIT=OFF): these sizes are not built in");
  DeltaProblem p;
  p.t = 0, p.init = true, p.dht = true;
  check_problem(p, false, 5);
  check_problem(p, true, 6);
}

TEST_CASE("gated delta rule: a decode step may update the state in place", "[delta][cpu]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT (EJK_ENABLE_ORC_JIT=OFF): these sizes are not built in");
  for (int64_t t : {1, 3}) {
    DeltaProblem p;
    p.t = t, p.init = true, p.segments = t == 3;
    const Call c = make_delta_call(p, false, 40 + uint64_t(t));
    const auto ref = reference("gated_delta_rule", c.inputs_only());
    const auto want = std::find_if(ref.begin(), ref.end(), [](const ReferenceOutput& r) { return r.name == "final_state"; });
    REQUIRE(want != ref.end());
    Args a = c.all(false);
    const TensorView h0 = *a.tensor("initial_state");
    a.set("final_state", h0);  // the same buffer: each task reads its tile before writing it
    run("gated_delta_rule", a);
    const std::vector<double> got = values(h0);
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); ++i)
      num += (got[i] - want->values[i]) * (got[i] - want->values[i]), den += want->values[i] * want->values[i];
    INFO(fmt::format("t {}: rel_l2 {:.3e}", t, std::sqrt(num / den)));
    CHECK(std::sqrt(num / den) <= 1e-5);
  }
}

// The chunked CPU forward and the token walk on the same problems: sequences shorter than,
// equal to and just past one chunk and a long one; segment starts at random, on chunk edges and
// inside chunks; the decay, the L2 norm and the initial state each on and off; the chunked sizes
// and an odd one (rows padded to 16 columns).
TEST_CASE("gated delta rule on the CPU, chunked and token walk: the float64 reference", "[delta][cpu][chunked]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT (EJK_ENABLE_ORC_JIT=OFF): these sizes are not built in");
  const int64_t sizes[][2] = {{64, 64}, {128, 128}, {64, 128}, {20, 36}};
  uint64_t seed = 300;
  int i = 0;
  for (DType t : {DType::f32, DType::bf16})
    for (const auto& kv : sizes)
      for (int64_t len : {1, 63, 64, 65, 200}) {
        DeltaProblem p;
        p.dtype = t, p.b = 2, p.h = 2, p.k = kv[0], p.v = kv[1], p.t = len;
        p.decay = i % 3 != 1, p.segments = i % 2 == 0, p.seg_mode = i % 4 == 0 ? 1 : 0, p.init = i % 3 != 2;
        p.l2norm = i % 5 != 3;
        if (!p.l2norm) p.k_scale = 1 / std::sqrt(double(p.k));
        ++i;
        for (int64_t chunk : {1, 64}) {
          p.chunk = chunk;
          check_problem(p, false, seed);
        }
        ++seed;
      }
}

// final_state in initial_state's buffer, chunked: each unit reads its whole state before its
// first chunk and writes it after its last.
TEST_CASE("gated delta rule on the CPU, chunked: the state may be updated in place", "[delta][cpu][chunked]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT (EJK_ENABLE_ORC_JIT=OFF): these sizes are not built in");
  for (int64_t t : {1, 70}) {
    DeltaProblem p;
    p.k = p.v = 64, p.t = t, p.init = true, p.segments = t > 1, p.chunk = 64;
    const Call c = make_delta_call(p, false, 80 + uint64_t(t));
    const auto ref = reference("gated_delta_rule", c.inputs_only());
    const auto want = std::find_if(ref.begin(), ref.end(), [](const ReferenceOutput& r) { return r.name == "final_state"; });
    REQUIRE(want != ref.end());
    Args a = c.all(false);
    const TensorView h0 = *a.tensor("initial_state");
    a.set("final_state", h0);
    const RunInfo info = run("gated_delta_rule", run_args(a, p, false));
    CHECK_THAT(info.key, ContainsSubstring(".c64"));
    const std::vector<double> got = values(h0);
    double num = 0, den = 0;
    for (size_t j = 0; j < got.size(); ++j)
      num += (got[j] - want->values[j]) * (got[j] - want->values[j]), den += want->values[j] * want->values[j];
    INFO(fmt::format("t {}: rel_l2 {:.3e}", t, std::sqrt(num / den)));
    CHECK(std::sqrt(num / den) <= 1e-5);
  }
}

// The reference's gradients against central differences of its forward, in float64 on f32
// inputs: loss = sum(o * d_o) + sum(final_state * d_final_state).
TEST_CASE("the gated delta rule reference backward matches finite differences of its forward", "[delta][reference]") {
  for (int variant = 0; variant < 3; ++variant) {
    DeltaProblem p;
    p.b = 2, p.t = 6, p.h = 2, p.k = 3, p.v = 4, p.init = true, p.dht = true;
    p.segments = variant == 1, p.l2norm = variant != 2;
    const Call bwd = make_delta_call(p, true, 11 + variant);
    const Args bargs = with_scalars(bwd.all(false), p);
    const auto grads = reference("gated_delta_rule_backward", bargs);
    auto loss = [&] {
      Args a;
      for (const auto& [name, b] : bwd.inputs)
        if (name != "d_o" && name != "d_final_state") a.set(name, b.view);
      const auto out = reference("gated_delta_rule", with_scalars(a, p));
      double l = 0;
      for (const auto& r : out) {
        const std::vector<double> w = values(*bargs.tensor(r.name == "o" ? "d_o" : "d_final_state"));
        for (size_t i = 0; i < r.values.size(); ++i) l += r.values[i] * w[i];
      }
      return l;
    };
    const std::vector<std::pair<std::string, std::string>> pairs = {
        {"q", "dq"}, {"k", "dk"}, {"v", "dv"}, {"beta", "dbeta"}, {"decay", "ddecay"},
        {"initial_state", "d_initial_state"}};
    for (const auto& [in, grad] : pairs) {
      const TensorView* x = bargs.tensor(in);
      const auto& analytic = std::find_if(grads.begin(), grads.end(), [&](const ReferenceOutput& r) { return r.name == grad; })->values;
      double num = 0, den = 0;
      std::vector<int64_t> idx(size_t(x->rank()), 0);
      for (size_t n = 0; n < analytic.size(); ++n) {
        int64_t at = 0;
        for (int64_t d = 0; d < x->rank(); ++d) at += idx[size_t(d)] * x->strides[d];
        float* e = static_cast<float*>(x->data) + at;
        const float saved = *e, step = 1.0f / 512;
        *e = saved + step;
        const double up = loss(), h_up = double(*e);
        *e = saved - step;
        const double down = loss(), h_down = double(*e);
        *e = saved;
        const double fd = (up - down) / (h_up - h_down);
        num += (fd - analytic[n]) * (fd - analytic[n]), den += analytic[n] * analytic[n];
        for (int64_t d = x->rank() - 1; d >= 0 && ++idx[size_t(d)] == x->shape[d]; --d) idx[size_t(d)] = 0;
      }
      INFO(fmt::format("variant {} {}: rel_l2 {:.3e}", variant, grad, std::sqrt(num / den)));
      CHECK(den > 0);
      CHECK(std::sqrt(num / den) < 1e-5);
    }
  }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no error";
}

TEST_CASE("bad gated delta rule input names the argument", "[delta][errors]") {
  DeltaProblem p;
  p.init = true;
  const Call c = make_delta_call(p, false, 5);
  auto with = [&](const char* name, const TensorView& t) {
    Args a = c.all(false);
    a.set(name, t);
    return error_of([&] { run("gated_delta_rule", a); });
  };
  const Tensor k_short = Tensor::empty({p.b, p.t, p.h, p.k - 1}, DType::f32);
  CHECK_THAT(with("k", k_short.view()), ContainsSubstring("k: dim 3 (K)"));
  const Tensor beta4 = Tensor::empty({p.b, p.t, p.h, 1}, DType::f32);
  CHECK_THAT(with("beta", beta4.view()), ContainsSubstring("beta"));
  const Tensor decay16 = Tensor::empty({p.b, p.t, p.h}, DType::bf16);
  CHECK_THAT(with("decay", decay16.view()), ContainsSubstring("decay"));
  const Tensor seg = Tensor::empty({p.b, p.t + 1}, DType::i32);
  CHECK_THAT(with("seg_ids", seg.view()), ContainsSubstring("seg_ids"));
  const Tensor state = Tensor::empty({p.b, p.h, p.k, p.v + 1}, DType::f32);
  CHECK_THAT(with("initial_state", state.view()), ContainsSubstring("initial_state"));
  Args a = c.all(false);
  a.set("softmax_scale", std::numeric_limits<double>::infinity());
  CHECK_THAT(error_of([&] { run("gated_delta_rule", a); }), ContainsSubstring("softmax_scale"));
  const Call bc = make_delta_call(p, true, 7);
  Args b = bc.all(false);
  const Tensor do_bad = Tensor::empty({p.b, p.t + 1, p.h, p.v}, DType::f32);
  b.set("d_o", do_bad.view());
  CHECK_THAT(error_of([&] { run("gated_delta_rule_backward", b); }), ContainsSubstring("d_o: dim 1 (T)"));
}

// The CLI cases' problems as `ejk run OP ... --check` makes them, against the reference.
TEST_CASE("the CLI cases of the gated delta rule make problems that check", "[delta][cli]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT (EJK_ENABLE_ORC_JIT=OFF): these sizes are not built in");
  const std::vector<std::vector<std::string>> option_sets = {
      {"--k", "16", "--v", "24", "--t", "30", "--segments", "--init"},
      {"--k", "4", "--v", "4", "--t", "5", "--no-decay", "--no-l2norm", "--b", "1"}};
  for (bool backward : {false, true}) {
    cli::OpCase* oc = nullptr;
    for (cli::OpCase* c : cli::op_cases()) if (std::string(c->op()) == op_name(backward)) oc = c;
    REQUIRE(oc != nullptr);
    for (std::vector<std::string> opts : option_sets) {
      if (backward) opts.push_back("--dht");
      cli::ProblemParser(*oc).parse(opts);
      cli::HostCase hc;
      hc.op = oc->op();
      std::mt19937_64 rng(17);
      for (const cli::InputSpec& in : oc->inputs(DType::f32)) {
        Tensor t = Tensor::empty(in.shape, in.dtype);
        oc->fill(in.name, t, rng);
        hc.inputs.emplace_back(in.name, std::move(t));
      }
      oc->scalars(hc);
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
        const auto r = std::find_if(ref.begin(), ref.end(), [&](const ReferenceOutput& x) { return x.name == name; });
        REQUIRE(r != ref.end());
        double num = 0, den = 0;
        bool finite = true;
        for (size_t i = 0; i < r->values.size(); ++i) {
          const double got = t.data_as<float>()[i];
          finite = finite && std::isfinite(got);
          num += (got - r->values[i]) * (got - r->values[i]), den += r->values[i] * r->values[i];
        }
        INFO(fmt::format("{} {}: {}: rel_l2 {:.3e}", oc->op(), fmt::join(opts, " "), name, std::sqrt(num / den)));
        CHECK(finite);
        CHECK(std::sqrt(num / den) <= 1e-5);
      }
    }
  }
}

TEST_CASE("gated delta rule on CUDA matches the float64 reference", "[delta][cuda][gpu]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  uint64_t seed = 500;
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (const DeltaProblem& p : problems(t)) {
      check_problem(p, false, seed++, Device{DeviceKind::cuda, 0});
      check_problem(p, true, seed++, Device{DeviceKind::cuda, 0});
    }
  DeltaProblem big;  // the pre-built size, several tiles
  big.dtype = DType::bf16, big.k = big.v = 128, big.t = 700, big.b = 2, big.h = 3, big.init = true, big.segments = true;
  big.dht = true;
  check_problem(big, false, seed++, Device{DeviceKind::cuda, 0});
  check_problem(big, true, seed++, Device{DeviceKind::cuda, 0});
}

// The chunked tensor-core forward (chunk 64): sequences shorter than, equal to and just past one
// chunk and long ones; segment starts inside chunks and on their edges; each feature on and off.
TEST_CASE("gated delta rule on CUDA, chunked: the float64 reference", "[delta][cuda][gpu][chunked]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  uint64_t seed = 900;
  int variant = 0;
  for (DType t : {DType::bf16, DType::f16})
    for (int64_t kv : {64, 128})
      for (int64_t len : {1, 63, 64, 65, 1000}) {
        DeltaProblem p;
        p.dtype = t, p.b = 2, p.h = 3, p.k = p.v = kv, p.t = len, p.chunk = 64;
        p.decay = variant % 4 != 3, p.l2norm = variant % 3 != 2, p.init = variant % 2 == 0;
        p.segments = variant % 5 != 4, p.seg_mode = variant % 2, p.pad = variant % 3 == 1 ? 3 : 0;
        p.k_scale = p.l2norm ? 1.0 : 1.0 / std::sqrt(double(kv));
        check_problem(p, false, seed++, Device{DeviceKind::cuda, 0});
        ++variant;
      }
  DeltaProblem mixed;  // K != V, both of the chunked sizes
  mixed.dtype = DType::bf16, mixed.b = 1, mixed.h = 2, mixed.k = 128, mixed.v = 64, mixed.t = 300, mixed.chunk = 64;
  mixed.init = mixed.segments = true;
  check_problem(mixed, false, seed++, Device{DeviceKind::cuda, 0});
  mixed.k = 64, mixed.v = 128;
  check_problem(mixed, false, seed++, Device{DeviceKind::cuda, 0});
  DeltaProblem decode = mixed;  // the heuristic keeps the token walk for a decode step only
  decode.k = decode.v = 128, decode.t = 1, decode.chunk = 0;
  CHECK_THAT(check_problem(decode, false, seed++, Device{DeviceKind::cuda, 0}), ContainsSubstring(".c1"));
  decode.t = 200;
  CHECK_THAT(check_problem(decode, false, seed++, Device{DeviceKind::cuda, 0}), ContainsSubstring(".c64"));
}

// final_state in initial_state's buffer on the GPU, token walk and chunked form: every block reads
// its state tile before it writes it.
TEST_CASE("gated delta rule on CUDA updates the state in place", "[delta][cuda][gpu][chunked]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  const Device gpu{DeviceKind::cuda, 0};
  for (int64_t chunk : {1, 64})
    for (int64_t t : {1, 130}) {
      DeltaProblem p;
      p.dtype = DType::bf16, p.b = 2, p.h = 3, p.k = p.v = 128, p.t = t, p.init = true, p.segments = true;
      p.chunk = chunk;
      const Call c = make_delta_call(p, false, 70 + uint64_t(t + chunk));
      const auto ref = reference("gated_delta_rule", c.inputs_only());
      std::vector<Tensor> keep;
      Args a;
      for (const auto& [name, b] : c.inputs) {
        keep.push_back(b.storage.to(gpu));
        TensorView v = b.view;
        v.device = gpu;
        v.data = static_cast<char*>(keep.back().data()) +
                 (static_cast<const char*>(b.view.data) - static_cast<const char*>(b.storage.data()));
        a.set(name, v);
      }
      Tensor o = Tensor::empty({p.b, p.t, p.h, p.v}, p.dtype).to(gpu);
      a.set("o", o.view());
      a.set("final_state", *a.tensor("initial_state"));
      const RunInfo info = run("gated_delta_rule", run_args(a, p, false));
      synchronize(gpu);
      for (const char* name : {"o", "final_state"}) {
        const Tensor got = (std::string(name) == "o" ? o : keep[c.inputs.size() - 1]).to(Device{});
        const auto want = std::find_if(ref.begin(), ref.end(), [&](const ReferenceOutput& r) { return r.name == name; });
        REQUIRE(want != ref.end());
        double num = 0, den = 0;
        bool finite = true;
        for (int64_t i = 0; i < got.numel(); ++i) {
          const double x = element(got, i);
          finite = finite && std::isfinite(x);
          num += (x - want->values[size_t(i)]) * (x - want->values[size_t(i)]);
          den += want->values[size_t(i)] * want->values[size_t(i)];
        }
        INFO(fmt::format("{} t {}: {}: rel_l2 {:.3e}", info.key, t, name, std::sqrt(num / den)));
        CHECK(finite);
        CHECK(std::sqrt(num / den) <= 1e-2);
      }
    }
}
