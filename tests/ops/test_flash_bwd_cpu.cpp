// flash_attention_backward on the CPU through the generic API: every feature of the forward
// in combinations (causal, window, segment ids, packed varlen, soft cap, per-head and
// shared sinks, full and broadcast bias, GQA/MQA), f32 and bf16, each gradient against the
// float64 reference with the project's tolerances and poisoned outputs; two runs bit-identical;
// the reference's gradients against central finite differences of the forward's reference;
// bad input named.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <fmt/format.h>

#include <functional>

#include "ejk/admin.h"
#include "ejk/core/error.h"
#include "flash_bwd_problem.h"

using namespace flash_bwd_test;
using Catch::Matchers::ContainsSubstring;

namespace {

constexpr const char* kOp = "flash_attention_backward";

double tolerance(DType t) { return t == DType::f32 ? 1e-5 : 2e-2; }

// block_q / block_k 0: the spec's heuristic.
void check_problem(const Problem& p, uint64_t seed, int64_t block_q = 0, int64_t block_k = 0) {
  Case c = make_case(p, seed);
  Args args = c.backward_args();
  if (block_q) args.tune("block_q", block_q).tune("block_k", block_k);
  const RunInfo info = run(kOp, args);
  const std::vector<ReferenceOutput> ref = reference(kOp, c.backward_args());
  for (const auto& [name, t] : c.outputs) {
    const auto r = std::find_if(ref.begin(), ref.end(), [&](const ReferenceOutput& x) { return x.name == name; });
    REQUIRE(r != ref.end());
    const Mismatch e = compare(t, r->values);
    INFO(fmt::format("{}: {} -> {}: rel_l2 {:.3e}", name, p.name(), info.key, e.rel_l2));
    CHECK_FALSE(e.nonfinite);
    // dsoftmax_aux's terms cancel: its bound is relative to their size (sink_term_sizes).
    if (name == "dsoftmax_aux") CHECK(sinks_within(c, t, r->values, tolerance(p.dtype)));
    else CHECK(e.rel_l2 <= tolerance(p.dtype));
  }
}

// Every feature, each in at least two combinations (each distinct key costs a JIT compile).
std::vector<Problem> feature_problems(DType dtype) {
  using W = std::array<int64_t, 2>;
  std::vector<Problem> v;
  auto add = [&](const std::function<void(Problem&)>& f) {
    Problem p;
    p.dtype = dtype;
    f(p);
    v.push_back(p);
  };
  add([](Problem& p) { p.causal = true, p.sinks = SinkKind::per_head, p.hq = 6, p.hkv = 2, p.d_lse = true; });
  add([](Problem& p) { p.window = W{7, 3}, p.softcap = 2.5, p.bias = BiasKind::shared_batch; });
  add([](Problem& p) { p.segments = true, p.bias = BiasKind::full, p.sinks = SinkKind::shared, p.num_sinks = 3; });
  add([](Problem& p) { p.varlen = true, p.b = 4, p.sq = 70, p.sk = 61, p.causal = true, p.softcap = 3.0; });
  add([](Problem& p) { p.varlen = true, p.b = 3, p.sq = 33, p.sk = 90, p.window = W{5, 20}, p.sinks = SinkKind::shared, p.d_lse = true; });
  add([](Problem& p) { p.bias = BiasKind::shared_both, p.segments = true, p.causal = true, p.window = W{12, 2}; });
  add([](Problem& p) { p.bias = BiasKind::shared_heads, p.hq = 4, p.hkv = 1, p.scale = 0.3, p.softcap = 4.0; });
  return v;
}

// Fewer, wider combinations for the 16-bit dtypes.
std::vector<Problem> wide_problems(DType dtype) {
  using W = std::array<int64_t, 2>;
  std::vector<Problem> v(3);
  for (Problem& p : v) p.dtype = dtype;
  v[0].causal = true, v[0].sinks = SinkKind::per_head, v[0].softcap = 3.0, v[0].bias = BiasKind::shared_heads;
  v[1].varlen = true, v[1].b = 3, v[1].sq = 80, v[1].sk = 70, v[1].window = W{9, 0}, v[1].hq = 4, v[1].hkv = 1;
  v[2].segments = true, v[2].bias = BiasKind::full, v[2].sinks = SinkKind::shared, v[2].d_lse = true;
  Problem w;  // shared sinks with d_lse: a dsoftmax_aux whose terms cancel
  w.dtype = dtype, w.sq = 100, w.sk = 90, w.window = W{9, 4}, w.bias = BiasKind::shared_batch;
  w.sinks = SinkKind::shared, w.d_lse = true;
  v.push_back(w);
  return v;
}

}  // namespace

TEST_CASE("flash attention backward on the CPU: pre-built variants", "[flash_bwd][cpu][aot]") {
  // The built-in keys (no per-score features): no JIT needed.
  uint64_t seed = 1;
  for (DType t : {DType::f32, DType::bf16})
    for (int64_t d : {64, 128}) {
      Problem p;
      p.dtype = t, p.d = d, p.b = 2, p.sq = 100, p.sk = 77, p.hq = 4, p.hkv = 2;
      check_problem(p, seed++);
    }
}

TEST_CASE("flash attention backward on the CPU: every feature in combinations, f32", "[flash_bwd][cpu]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT: the feature variants are not built in");
  uint64_t seed = 100;
  for (const Problem& p : feature_problems(DType::f32)) check_problem(p, seed++);
}

TEST_CASE("flash attention backward on the CPU: feature combinations, bf16", "[flash_bwd][cpu]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT: the feature variants are not built in");
  uint64_t seed = 200;
  for (const Problem& p : wide_problems(DType::bf16)) check_problem(p, seed++);
}

TEST_CASE("flash attention backward on the CPU: head dims and blocks with partial vectors and tiles", "[flash_bwd][cpu]") {
  // The tile products pad head_dim to whole vectors and transpose K and V in square blocks of
  // vectors with a scalar tail; lengths leave partial query and key tiles.
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT: these variants are not built in");
  using W = std::array<int64_t, 2>;
  struct Shape {
    int64_t d, block_q, block_k;
    DType dtype;
  };
  uint64_t seed = 300;
  for (const Shape& t : {Shape{8, 16, 16, DType::f32}, Shape{72, 32, 48, DType::f32}, Shape{24, 48, 32, DType::bf16},
                         Shape{40, 16, 32, DType::f32}, Shape{64, 128, 128, DType::f32}}) {
    Problem p;
    p.dtype = t.dtype, p.d = t.d, p.sq = 150, p.sk = 133, p.hq = 6, p.hkv = 2;
    if (t.d == 8) p.causal = true;
    if (t.d == 72) p.window = W{40, 9}, p.segments = true, p.bias = BiasKind::full;
    if (t.d == 24) p.softcap = 2.0, p.sinks = SinkKind::per_head;
    if (t.d == 40) p.varlen = true, p.b = 3, p.sq = 90, p.sk = 101, p.causal = true;
    check_problem(p, seed++, t.block_q, t.block_k);
  }
}

TEST_CASE("flash attention backward on the CPU is deterministic", "[flash_bwd][cpu]") {
  Problem p;
  p.d = 64, p.b = 2, p.sq = 150, p.sk = 150, p.hq = 8, p.hkv = 2;
  Case a = make_case(p, 7), b = make_case(p, 7);
  run(kOp, a.backward_args());
  run(kOp, b.backward_args());
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    INFO(a.outputs[i].first);
    CHECK(std::memcmp(a.outputs[i].second.data(), b.outputs[i].second.data(), a.outputs[i].second.nbytes()) == 0);
  }
}

TEST_CASE("flash attention backward on the CPU: probabilities stay finite at a huge scale", "[flash_bwd][cpu]") {
  // Logits near 2^31 * 10 carry an f32 rounding of thousands: P = exp(x - lse) of a recomputed
  // logit could exceed 1 by exp(thousands). Precision is lost at such a scale; infinity is not.
  Problem p;
  // Lengths whose keys the heuristic gives built-in variants: a build without the CPU JIT runs it.
  p.d = 64, p.b = 2, p.sq = 100, p.sk = 130, p.hq = 4, p.hkv = 2, p.scale = 2147483648.0;
  Case c = make_case(p, 5);
  run(kOp, c.backward_args());
  for (const auto& [name, t] : c.outputs) {
    INFO(name);
    CHECK_FALSE(compare(t, std::vector<double>(size_t(t.numel()), 0.0)).nonfinite);
  }
}

// The reference's gradients against central differences of the forward's reference, float64 on
// f32 inputs: loss = sum(out * d_out) (+ sum(lse * d_lse)). Tiny shapes; every differentiable input.
TEST_CASE("the reference backward matches finite differences of the reference forward", "[flash_bwd][reference]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT: the cases' forward variants are not built in");
  std::vector<Problem> problems;
  for (int variant = 0; variant < 4; ++variant) {
    Problem p;
    p.b = 2, p.sq = 5, p.sk = 6, p.hq = 2, p.hkv = 1, p.d = 8;
    if (variant == 0) p.bias = BiasKind::shared_batch, p.sinks = SinkKind::per_head, p.softcap = 1.5, p.d_lse = true;
    if (variant == 1) p.causal = true, p.window = std::array<int64_t, 2>{2, 1}, p.sinks = SinkKind::shared, p.segments = true;
    if (variant == 2) p.varlen = true, p.sq = 7, p.sk = 9, p.softcap = 2.0, p.d_lse = true;
    if (variant == 3) p.bias = BiasKind::full, p.hkv = 2, p.scale = 0.7;
    problems.push_back(p);
  }
  for (size_t n = 0; n < problems.size(); ++n) {
    const Problem& p = problems[n];
    Case c = make_case(p, 31 + n);
    const auto grads = reference(kOp, c.backward_args());
    const std::vector<double> d_out = [&] {
      std::vector<double> w;
      const Tensor& t = c.get("d_out");
      for (int64_t i = 0; i < t.numel(); ++i) w.push_back(value_at(t, i));
      return w;
    }();
    const Tensor* d_lse = p.d_lse ? &c.get("d_lse") : nullptr;
    auto loss = [&] {  // sum(out * d_out) + sum(lse * d_lse)
      const auto out = reference("flash_attention", c.forward_args());
      double l = 0;
      for (const auto& r : out)
        for (size_t i = 0; i < r.values.size(); ++i)
          if (r.name == "out") l += r.values[i] * d_out[i];
          else if (d_lse && std::isfinite(r.values[i])) l += r.values[i] * value_at(*d_lse, int64_t(i));
      return l;
    };
    std::vector<std::pair<std::string, std::string>> pairs = {{"q", "dq"}, {"k", "dk"}, {"v", "dv"}};
    if (p.bias != BiasKind::none) pairs.emplace_back("bias", "dbias");
    if (p.sinks != SinkKind::none) pairs.emplace_back("softmax_aux", "dsoftmax_aux");
    for (const auto& [in, grad] : pairs) {
      const Tensor& x = c.get(in);
      const auto& analytic =
          std::find_if(grads.begin(), grads.end(), [&](const ReferenceOutput& r) { return r.name == grad; })->values;
      double num = 0, den = 0;
      for (int64_t i = 0; i < x.numel(); ++i) {
        float* e = x.data_as<float>() + i;
        const float saved = *e, step = 1.0f / 1024;
        *e = saved + step;
        const double up = loss(), h_up = double(*e);
        *e = saved - step;
        const double down = loss(), h_down = double(*e);
        *e = saved;
        const double fd = (up - down) / (h_up - h_down);
        num += (fd - analytic[size_t(i)]) * (fd - analytic[size_t(i)]), den += analytic[size_t(i)] * analytic[size_t(i)];
      }
      INFO(fmt::format("{}: {}: rel_l2 {:.3e}", p.name(), grad, std::sqrt(num / den)));
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

TEST_CASE("bad flash attention backward input names the argument", "[flash_bwd][errors]") {
  Problem p;
  p.d = 64;
  Case c = make_case(p, 5);
  {
    Args a = c.backward_args();
    a.set("normalize_output", false);
    CHECK_THAT(error_of([&] { run(kOp, a); }), ContainsSubstring("normalize_output: must be true"));
  }
  {
    Tensor wrong = Tensor::empty({p.b, p.sq, p.hq, 32}, DType::f32);
    Args a = c.backward_args();
    a.set("d_out", wrong.view());
    CHECK_THAT(error_of([&] { run(kOp, a); }), ContainsSubstring("d_out: dim 3 (D)"));
  }
  {
    Tensor lse = Tensor::empty({p.b, p.hq, p.sq + 1}, DType::f32);
    Args a = c.backward_args();
    a.set("lse", lse.view());
    CHECK_THAT(error_of([&] { run(kOp, a); }), ContainsSubstring("lse"));
  }
  {
    Tensor db = Tensor::empty({p.b, p.hq, p.sq, p.sk}, DType::f32);
    Args a = c.backward_args();
    a.set("dbias", db.view());
    CHECK_THAT(error_of([&] { run(kOp, a); }), ContainsSubstring("dbias"));
  }
}

TEST_CASE("flash attention backward output specs follow the inputs", "[flash_bwd][api]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT: the case's forward variant is not built in");
  Problem p;
  p.d = 64, p.bias = BiasKind::shared_heads, p.sinks = SinkKind::shared;
  Case c = make_case(p, 9);
  Args a = c.scalars;
  for (const auto& [n, t] : c.inputs) a.set(n, t.view());
  for (const OutputSpec& o : output_specs(kOp, a)) CHECK(o.shape == c.get(o.name).shape());
  Problem plain;
  Case d = make_case(plain, 10);
  Args b = d.scalars;
  for (const auto& [n, t] : d.inputs) b.set(n, t.view());
  for (const OutputSpec& o : output_specs(kOp, b))
    if (o.name == "dbias" || o.name == "dsoftmax_aux") CHECK(o.shape.size() == 0);
}
