// recurrent_attention and recurrent_attention_backward through the generic API: every gate
// combination, reverse, initial and final states, varlen with empty sequences, padded and
// token-major inputs, f32/bf16/f16, on the CPU and (where a GPU can run) on CUDA, against the
// float64 reference with the project's tolerances. The reference's gradients are checked against
// central finite differences of its own forward. Bad inputs must name the argument.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <fmt/ranges.h>

#include <functional>

#include "ejk/admin.h"
#include "ejk/core/error.h"
#include "op_case.h"
#include "run_cmd.h"
#include "recurrent_problem.h"

using namespace ejk;
using namespace recurrent_test;
using Catch::Matchers::ContainsSubstring;

namespace {

const char* op_name(bool backward) { return backward ? "recurrent_attention_backward" : "recurrent_attention"; }

// Runs p on `device` into poisoned outputs and checks every output against the reference.
void check_problem(const Problem& p, bool backward, Device device, uint64_t seed) {
  Call c = make_call(p, backward, seed);
  std::vector<Tensor> keep;
  Args args;
  auto on_device = [&](const Buffer& b) {
    if (device.kind == DeviceKind::cpu) return b.view;
    keep.push_back(b.storage.to(device));
    TensorView v = b.view;
    v.device = device;
    v.data = static_cast<char*>(keep.back().data()) +
             (static_cast<const char*>(b.view.data) - static_cast<const char*>(b.storage.data()));
    return v;
  };
  for (const auto& [name, b] : c.inputs) args.set(name, on_device(b));
  for (const auto& [name, b] : c.outputs) args.set(name, on_device(b));
  std::vector<Tensor> out_dev(keep.end() - std::ptrdiff_t(device.kind == DeviceKind::cpu ? 0 : c.outputs.size()),
                              keep.end());
  if (c.varlen) {
    if (device.kind == DeviceKind::cpu) {
      args.set("cu_seqlens", c.cu.view());
    } else {
      keep.push_back(c.cu.to(device));
      args.set("cu_seqlens", keep.back().view());
    }
  }
  if (p.reverse) args.set("reverse", true);
  const RunInfo info = run(op_name(backward), args);
  synchronize(device);
  const std::vector<ReferenceOutput> ref = reference(op_name(backward), c.all(p.reverse));
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    const auto& [name, b] = c.outputs[i];
    const Tensor host = device.kind == DeviceKind::cpu ? b.storage : out_dev[i].to(Device{});
    const auto r = std::find_if(ref.begin(), ref.end(), [&](const ReferenceOutput& x) { return x.name == name; });
    REQUIRE(r != ref.end());
    const Mismatch e = compare(b, host, r->values);
    INFO(fmt::format("{} {}: {} -> {}: rel_l2 {:.3e}", op_name(backward), name, p.name(), info.key, e.rel_l2));
    CHECK_FALSE(e.nonfinite);
    CHECK(e.rel_l2 <= tolerance(p.dtype, backward));
    CHECK(e.fence_intact);
  }
}

// Problems of every gate combination with reverse, states and varlen varied among them.
std::vector<Problem> gate_problems(DType dtype) {
  std::vector<Problem> v;
  for (unsigned gates = 0; gates < 16; ++gates) {
    Problem p;
    p.dtype = dtype, p.gates = gates;
    p.reverse = gates % 3 == 1, p.init = gates % 2 == 1, p.varlen = gates % 4 >= 2, p.dht = gates % 5 < 2;
    p.state = gates % 7 != 3;
    if (p.varlen) p.b = 4, p.t = 23;
    v.push_back(p);
  }
  return v;
}

std::vector<Problem> placement_problems() {
  std::vector<Problem> v;
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    Problem p;
    p.dtype = t, p.gates = kG | kGamma | kGv, p.init = true;
    p.pad = 3, p.token_major = true;  // padded, token-major inputs
    v.push_back(p);
    p.token_major = false, p.varlen = true, p.leading_one = true, p.b = 5, p.t = 30, p.pad = 1;
    p.cu = {0, 0, 12, 12, 29, 30};  // empty sequences first and in the middle
    v.push_back(p);
    Problem big;  // several column tiles and a longer sequence (many checkpoint chunks)
    big.dtype = t, big.gates = kGk | kGv, big.b = 1, big.t = 150, big.h = 1, big.k = 24, big.v = 40, big.dht = true;
    big.reverse = t == DType::bf16;
    v.push_back(big);
  }
  return v;
}

// Forward problems with g_head, alone and with the other gates, over placements and varlen.
std::vector<Problem> head_gate_problems(DType dtype) {
  std::vector<Problem> v;
  for (unsigned gates : {0u, unsigned(kGamma), unsigned(kG | kGamma), unsigned(kGk | kGv)}) {
    Problem p;
    p.dtype = dtype, p.gates = gates | kGh, p.init = gates != 0, p.reverse = gates == kGamma;
    v.push_back(p);
    p.varlen = true, p.leading_one = gates == kGamma, p.b = 4, p.t = 30, p.cu = {0, 9, 9, 29, 30}, p.pad = 1;
    v.push_back(p);
  }
  Problem tm;
  tm.dtype = dtype, tm.gates = kGh | kGamma, tm.pad = 3, tm.token_major = true, tm.t = 70, tm.k = 64, tm.v = 64;
  v.push_back(tm);
  return v;
}

Device gpu() { return {DeviceKind::cuda, 0}; }

}  // namespace

TEST_CASE("recurrent attention on the CPU: every gate combination, f32", "[recurrent][cpu]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT (EJK_ENABLE_ORC_JIT=OFF): these sizes are not built in");
  uint64_t seed = 1;
  for (const Problem& p : gate_problems(DType::f32)) {
    check_problem(p, false, Device{}, seed++);
    check_problem(p, true, Device{}, seed++);
  }
}

TEST_CASE("recurrent attention on the CPU: bf16 and f16, placements, varlen, long sequences", "[recurrent][cpu]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT (EJK_ENABLE_ORC_JIT=OFF): these sizes are not built in");
  uint64_t seed = 100;
  for (const Problem& p : placement_problems()) {
    check_problem(p, false, Device{}, seed++);
    check_problem(p, true, Device{}, seed++);
  }
}

TEST_CASE("recurrent attention on the CPU: g_head, one log decay per token and head", "[recurrent][cpu]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT (EJK_ENABLE_ORC_JIT=OFF): these keys are not built in");
  uint64_t seed = 700;
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (const Problem& p : head_gate_problems(t)) {
      check_problem(p, false, Device{}, seed++);
      check_problem(p, true, Device{}, seed++);
    }
}

TEST_CASE("g_head is g broadcast along the key dim", "[recurrent][reference]") {
  for (bool backward : {false, true}) {
    Problem p;
    p.dtype = DType::f32, p.gates = kGh | kGamma, p.init = true, p.t = 12, p.k = 6, p.v = 5, p.dht = true;
    const Call c = make_call(p, backward, 31);
    // The same call with g [B, T, H, K] = g_head[..., None] instead of g_head.
    Call wide = c;
    const auto gh = std::find_if(wide.inputs.begin(), wide.inputs.end(), [](const auto& x) { return x.first == "g_head"; });
    REQUIRE(gh != wide.inputs.end());
    Buffer g;
    g.storage = Tensor::empty({p.b, p.t, p.h, p.k}, DType::f32);
    const TensorView& hv = gh->second.view;
    for (int64_t b = 0; b < p.b; ++b)
      for (int64_t t = 0; t < p.t; ++t)
        for (int64_t h = 0; h < p.h; ++h)
          for (int64_t k = 0; k < p.k; ++k)
            g.storage.data_as<float>()[((b * p.t + t) * p.h + h) * p.k + k] =
                static_cast<const float*>(hv.data)[b * hv.strides[0] + t * hv.strides[1] + h * hv.strides[2]];
    g.view = g.storage.view();
    wide.inputs.erase(gh);
    wide.inputs.emplace_back("g", g);
    // The backward's outputs, dg included (g_head's gradient is its sum over K), are the same.
    const std::vector<ReferenceOutput> a = reference(op_name(backward), c.all(false));
    const std::vector<ReferenceOutput> b = reference(op_name(backward), wide.all(false));
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      REQUIRE(a[i].values.size() == b[i].values.size());
      double diff = 0, norm = 0;
      for (size_t x = 0; x < a[i].values.size(); ++x)
        diff = std::max(diff, std::abs(a[i].values[x] - b[i].values[x])), norm = std::max(norm, std::abs(b[i].values[x]));
      INFO(op_name(backward) << " " << a[i].name);
      CHECK(norm > 0);
      CHECK(diff <= 1e-12 * norm);
    }
  }
}

TEST_CASE("recurrent attention on the CPU: pre-built sizes K = V = 64", "[recurrent][cpu]") {
  Problem p;  // no flags: the AOT sets build only gate-free, forward-in-time keys
  p.k = p.v = 64, p.t = 40;
  for (DType t : {DType::f32, DType::bf16}) {
    p.dtype = t;
    // Without the CPU JIT the key must be built in (a build narrowed by EJK_VARIANTS, or a CPU
    // without AVX2, may lack it).
    for (bool backward : {false, true}) {
      const Call c = make_call(p, backward, 1);
      const std::string key = variant_key(op_name(backward), c.all(false));
      bool builtin = false;
      for (const OpListing& l : list_ops()) builtin = builtin || std::count(l.builtin.begin(), l.builtin.end(), key) > 0;
      if (!builtin && !cpu_jit_available()) SKIP(key << " is not built in and this build has no CPU JIT");
    }
    check_problem(p, false, Device{}, 7);
    check_problem(p, true, Device{}, 8);
  }
}

TEST_CASE("recurrent attention: a zero-length sequence passes its state through", "[recurrent][cpu]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT (EJK_ENABLE_ORC_JIT=OFF): these sizes are not built in");
  Problem p;
  p.varlen = true, p.b = 3, p.t = 6, p.cu = {0, 6, 6, 6}, p.init = true, p.dht = true, p.gates = kGk;
  Call c = make_call(p, false, 3);
  const auto ref = reference("recurrent_attention", c.inputs_only());
  const auto& st = std::find_if(ref.begin(), ref.end(), [](const ReferenceOutput& r) { return r.name == "final_state"; })->values;
  const Args inputs = c.inputs_only();  // the view below points into it
  const TensorView* h0 = inputs.tensor("initial_state");
  const int64_t per = p.h * p.k * p.v;
  for (int64_t e = per; e < 3 * per; ++e) CHECK(st[size_t(e)] == double(static_cast<const float*>(h0->data)[e]));
  check_problem(p, false, Device{}, 3);
  check_problem(p, true, Device{}, 4);
  Problem empty;  // dense, no tokens at all: final_state is initial_state, d_initial_state d_final_state
  empty.t = 0, empty.init = true, empty.dht = true, empty.gates = kGv;
  check_problem(empty, false, Device{}, 5);
  check_problem(empty, true, Device{}, 6);
}

// The reference's gradients against central differences of its forward, in float64 on f32
// inputs: loss = sum(o * d_o) + sum(final_state * d_final_state).
TEST_CASE("the reference backward matches finite differences of the reference forward", "[recurrent][reference]") {
  for (int variant = 0; variant < 3; ++variant) {
    Problem p;
    p.b = 2, p.t = 5, p.h = 2, p.k = 3, p.v = 4, p.init = true, p.dht = true, p.gates = kG | kGamma | kGk | kGv;
    p.reverse = variant == 1;
    if (variant == 2) p.varlen = true, p.t = 7, p.cu = {0, 3, 7};
    const Call bwd = make_call(p, true, 11 + variant);
    const Args bargs = bwd.all(p.reverse);
    const auto grads = reference("recurrent_attention_backward", bargs);
    auto loss = [&] {
      Args a;
      for (const auto& [name, b] : bwd.inputs)
        if (name != "d_o" && name != "d_final_state") a.set(name, b.view);
      if (bwd.varlen) a.set("cu_seqlens", bwd.cu.view());
      if (p.reverse) a.set("reverse", true);
      const auto out = reference("recurrent_attention", a);
      double l = 0;
      for (const auto& r : out) {
        const std::vector<double> w = values(*bargs.tensor(r.name == "o" ? "d_o" : "d_final_state"));
        for (size_t i = 0; i < r.values.size(); ++i) l += r.values[i] * w[i];
      }
      return l;
    };
    const std::vector<std::pair<std::string, std::string>> pairs = {
        {"q", "dq"}, {"k", "dk"}, {"v", "dv"}, {"g", "dg"}, {"gk", "dgk"}, {"gv", "dgv"}, {"initial_state", "d_initial_state"}};
    for (const auto& [in, grad] : pairs) {
      const TensorView* x = bargs.tensor(in);
      const auto& analytic = std::find_if(grads.begin(), grads.end(), [&](const ReferenceOutput& r) { return r.name == grad; })->values;
      // Walk the view's elements in row-major order (inputs may be strided).
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

// Runs `f` and returns the InvalidArgument message ("no error" when it passes).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no error";
}

TEST_CASE("bad recurrent attention input names the argument", "[recurrent][errors]") {
  Problem p;
  p.gates = kGamma | kGv, p.init = true;
  const Call c = make_call(p, false, 5);
  auto with = [&](const char* name, const TensorView& t) {
    Args a = c.all(false);
    a.set(name, t);
    return error_of([&] { run("recurrent_attention", a); });
  };
  const Tensor k_short = Tensor::empty({p.b, p.t, p.h, p.k - 1}, DType::f32);
  CHECK_THAT(with("k", k_short.view()), ContainsSubstring("k: dim 3 (K)"));
  const Tensor gamma = Tensor::empty({p.h + 1}, DType::f32);
  CHECK_THAT(with("g_gamma", gamma.view()), ContainsSubstring("g_gamma"));
  const Tensor state = Tensor::empty({p.b, p.h, p.k, p.v + 1}, DType::f32);
  CHECK_THAT(with("initial_state", state.view()), ContainsSubstring("initial_state"));
  const Tensor gv16 = Tensor::empty({p.b, p.t, p.h, p.v}, DType::bf16);
  CHECK_THAT(with("gv", gv16.view()), ContainsSubstring("gv"));
  Args a = c.all(false);
  a.set("softmax_scale", std::numeric_limits<double>::infinity());
  CHECK_THAT(error_of([&] { run("recurrent_attention", a); }), ContainsSubstring("softmax_scale: must be finite"));

  Problem zp;  // no gates, no states: only q and k carry K
  zp.state = false;
  const Tensor empty_k = Tensor::empty({zp.b, zp.t, zp.h, 0}, DType::f32);
  const Call zc = make_call(zp, false, 8);
  Args zero = zc.all(false);
  zero.set("q", empty_k.view()).set("k", empty_k.view());
  CHECK_THAT(error_of([&] { run("recurrent_attention", zero); }), ContainsSubstring("q: its last dim (K) must be at least 1"));

  Problem vp;
  vp.varlen = true, vp.b = 2, vp.t = 8, vp.cu = {0, 3, 7};  // does not end at the packed length
  const Call vc = make_call(vp, false, 6);
  CHECK_THAT(error_of([&] { run("recurrent_attention", vc.all(false)); }), ContainsSubstring("cu_seqlens: last entry"));
  Problem bp;
  const Call bc = make_call(bp, true, 7);
  Args b = bc.all(false);
  const Tensor do_bad = Tensor::empty({bp.b, bp.t + 1, bp.h, bp.v}, DType::f32);
  b.set("d_o", do_bad.view());
  CHECK_THAT(error_of([&] { run("recurrent_attention_backward", b); }), ContainsSubstring("d_o: dim 1 (T)"));
}

TEST_CASE("recurrent attention output specs follow the inputs", "[recurrent][api]") {
  Problem p;
  p.varlen = true, p.leading_one = true, p.b = 3, p.t = 10;
  const Call c = make_call(p, true, 9);
  const auto specs = output_specs("recurrent_attention_backward", c.inputs_only());
  for (const OutputSpec& s : specs) {
    if (s.name == "dq") CHECK(s.shape == Dims{1, 10, p.h, p.k});
    if (s.name == "dgv") CHECK(s.shape == Dims{1, 10, p.h, p.v});
    if (s.name == "d_initial_state") CHECK((s.shape == Dims{3, p.h, p.k, p.v} && s.dtype == DType::f32));
  }
  CHECK(specs.size() == 7);
}

// The CLI cases' problems as `ejk run OP ... --check` makes them: parsed options, random
// inputs, every output the spec lists, against the reference.
TEST_CASE("the CLI cases of recurrent attention make problems that check", "[recurrent][cli]") {
  const std::vector<std::vector<std::string>> option_sets = {
      {"--k", "64", "--v", "64", "--t", "20"},  // pre-built: g_gamma and gk (the case's default gates) run by JIT
      {"--k", "8", "--v", "24", "--t", "30", "--gates", "g,gv", "--init", "--reverse", "--varlen", "--b", "4"},
      {"--k", "4", "--v", "4", "--t", "5", "--gates", "none", "--b", "1"}};
  for (bool backward : {false, true}) {
    cli::OpCase* oc = nullptr;
    for (cli::OpCase* c : cli::op_cases()) if (std::string(c->op()) == op_name(backward)) oc = c;
    REQUIRE(oc != nullptr);
    for (std::vector<std::string> opts : option_sets) {
      if (!cpu_jit_available()) SKIP("this build has no CPU JIT (EJK_ENABLE_ORC_JIT=OFF): the cases' gates are not built in");
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

TEST_CASE("recurrent attention on CUDA matches the float64 reference", "[recurrent][cuda][gpu]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  uint64_t seed = 500;
  for (const Problem& p : gate_problems(DType::f32)) {
    check_problem(p, false, gpu(), seed++);
    check_problem(p, true, gpu(), seed++);
  }
  for (const Problem& p : placement_problems()) {
    check_problem(p, false, gpu(), seed++);
    check_problem(p, true, gpu(), seed++);
  }
  for (DType t : {DType::f32, DType::bf16})
    for (const Problem& p : head_gate_problems(t)) check_problem(p, false, gpu(), seed++);
  Problem big;  // the pre-built sizes, many tiles and chunks
  big.dtype = DType::bf16, big.k = big.v = 128, big.t = 700, big.b = 2, big.h = 3, big.gates = kGk | kGamma, big.dht = true;
  check_problem(big, false, gpu(), seed++);
  check_problem(big, true, gpu(), seed++);
}
