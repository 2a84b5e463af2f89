// The dense attention mask (attention_mask, the `.dmask` variants) of flash_attention and
// flash_attention_backward on the CPU: forward outputs and every gradient against the float64
// reference for random masks (densities 0, 0.3 and 1, a fully hidden row, fully hidden tiles,
// broadcast batch and head dims), alone and with causal, window, segment ids, bias and sinks;
// keys behind fully hidden tiles are never read (NaN there stays out of every output); the
// mask's own errors name it.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <limits>

#include "ejk/admin.h"
#include "ejk/core/error.h"
#include "flash_bwd_problem.h"

using namespace flash_bwd_test;
using Catch::Matchers::ContainsSubstring;

namespace {

double tolerance(DType t, bool gradient) { return t == DType::f32 ? 1e-5 : gradient ? 2e-2 : 1e-2; }

const ReferenceOutput& find(const std::vector<ReferenceOutput>& ref, const std::string& name) {
  const auto r = std::find_if(ref.begin(), ref.end(), [&](const ReferenceOutput& x) { return x.name == name; });
  REQUIRE(r != ref.end());
  return *r;
}

// lse against the reference: the same infinities (rows with nothing visible), close elsewhere.
void check_lse(const Tensor& lse, const std::vector<double>& want, double tol) {
  double worst = 0;
  for (int64_t i = 0; i < lse.numel(); ++i) {
    const double x = lse.data_as<float>()[i], y = want[size_t(i)];
    REQUIRE_FALSE(std::isnan(x));
    REQUIRE(std::isinf(x) == std::isinf(y));
    if (std::isinf(y)) REQUIRE(x == y);
    else worst = std::max(worst, std::abs(x - y) / std::max(1.0, std::abs(y)));
  }
  CHECK(worst <= 10 * tol);
}

// The forward (run by make_case) and the backward of one problem against the reference.
void check_problem(const Problem& p, uint64_t seed) {
  Case c = make_case(p, seed);
  const std::vector<ReferenceOutput> fwd = reference("flash_attention", c.forward_args());
  const Mismatch out = compare(c.get("out"), find(fwd, "out").values);
  INFO(fmt::format("out: {}: rel_l2 {:.3e}", p.name(), out.rel_l2));
  CHECK_FALSE(out.nonfinite);
  CHECK(out.rel_l2 <= tolerance(p.dtype, false));
  check_lse(c.get("lse"), find(fwd, "lse").values, tolerance(p.dtype, false));

  const RunInfo info = run("flash_attention_backward", c.backward_args());
  CHECK_THAT(info.key, ContainsSubstring(".dmask"));
  const std::vector<ReferenceOutput> ref = reference("flash_attention_backward", c.backward_args());
  for (const auto& [name, t] : c.outputs) {
    const Mismatch e = compare(t, find(ref, name).values);
    INFO(fmt::format("{}: {} -> {}: rel_l2 {:.3e}", name, p.name(), info.key, e.rel_l2));
    CHECK_FALSE(e.nonfinite);
    if (name == "dsoftmax_aux") CHECK(sinks_within(c, t, find(ref, name).values, tolerance(p.dtype, true)));
    else CHECK(e.rel_l2 <= tolerance(p.dtype, true));
  }
}

Problem masked(DType dtype, DenseMask m, const std::function<void(Problem&)>& more = {}) {
  Problem p;
  p.dtype = dtype, p.b = 2, p.sq = 150, p.sk = 170, p.hq = 4, p.hkv = 2, p.mask = m;
  if (more) more(p);
  return p;
}

// The masks of the brief, alone, then each with another mask term.
std::vector<Problem> problems(DType dtype) {
  using W = std::array<int64_t, 2>;
  std::vector<Problem> v;
  v.push_back(masked(dtype, {0.3}));
  v.push_back(masked(dtype, {1.0}));
  v.push_back(masked(dtype, {0.0}));
  v.push_back(masked(dtype, {0.7, false, false, true}));
  v.push_back(masked(dtype, {0.3, false, true, true}, [](Problem& p) { p.causal = true; }));
  v.push_back(masked(dtype, {0.5, true, false, false}, [](Problem& p) { p.segments = true; }));
  v.push_back(masked(dtype, {0.4, true, true, true}, [](Problem& p) {
    p.window = W{40, 9}, p.bias = BiasKind::shared_heads, p.sinks = SinkKind::per_head;
  }));
  v.push_back(masked(dtype, {0.6}, [](Problem& p) { p.hkv = 1, p.softcap = 3.0, p.d_lse = true, p.segments = true; }));
  return v;
}

}  // namespace

TEST_CASE("dense mask on the CPU: forward and gradients match the float64 reference, f32", "[flash][dmask][cpu]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT: the dense-mask variants are not built in");
  uint64_t seed = 700;
  for (const Problem& p : problems(DType::f32)) check_problem(p, seed++);
}

TEST_CASE("dense mask on the CPU: forward and gradients match the float64 reference, bf16", "[flash][dmask][cpu]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT: the dense-mask variants are not built in");
  uint64_t seed = 800;
  std::vector<Problem> v = problems(DType::bf16);
  for (size_t i : {0, 3, 4, 6}) check_problem(v[i], seed++);
}

TEST_CASE("dense mask: keys of fully hidden tiles are never read", "[flash][dmask][cpu]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT: the dense-mask variants are not built in");
  // Keys [64, 128) are hidden from every query: with 32- or 64-key tiles those tiles are skipped,
  // so NaN in their K and V rows reaches no output (a masked pair inside a computed tile would
  // carry it through 0 * NaN).
  for (bool causal : {false, true}) {
    Problem p = masked(DType::f32, {0.5, false, false, true}, [&](Problem& q) { q.causal = causal; });
    Case c = make_case(p, 900);
    for (const char* name : {"k", "v"}) {
      Tensor& t = const_cast<Tensor&>(c.get(name));
      float* x = t.data_as<float>();
      for (int64_t i = 0; i < t.numel(); ++i)
        if (i / (p.hkv * p.d) % p.sk >= 64 && i / (p.hkv * p.d) % p.sk < 128) x[i] = std::nanf("");
    }
    Tensor out = Tensor::empty(c.get("out").shape(), DType::f32), lse = Tensor::empty(c.get("lse").shape(), DType::f32);
    Args f = c.forward_args();
    f.set("out", out.view()).set("lse", lse.view());
    const RunInfo info = run("flash_attention", f);
    INFO(info.key);
    CHECK_FALSE(compare(out, find(reference("flash_attention", c.forward_args()), "out").values).nonfinite);
    Args b = c.backward_args();
    b.set("out", out.view()).set("lse", lse.view());
    run("flash_attention_backward", b);
    for (const auto& [name, t] : c.outputs) {
      INFO(name);
      for (int64_t i = 0; i < t.numel(); ++i) {
        const bool hidden_key = name != "dq" && i / (p.hkv * p.d) % p.sk >= 64 && i / (p.hkv * p.d) % p.sk < 128;
        const float x = t.data_as<float>()[i];
        REQUIRE(std::isfinite(x));
        if (hidden_key) REQUIRE(x == 0.0f);  // dk, dv of keys no query sees
      }
    }
  }
}

TEST_CASE("a dense mask of another shape or dtype is refused by name", "[flash][dmask][errors]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT: the case's dense-mask forward is not built in");
  Problem p = masked(DType::f32, {0.5});
  p.sq = 20, p.sk = 24;
  Case c = make_case(p, 1);
  Tensor out = Tensor::empty(c.get("out").shape(), DType::f32), lse = Tensor::empty(c.get("lse").shape(), DType::f32);
  Args f = c.forward_args();
  f.set("out", out.view()).set("lse", lse.view());
  Tensor wrong = Tensor::empty({p.b, p.hq, p.sq, p.sk + 1}, DType::u8);
  f.set("attention_mask", wrong.view());
  CHECK_THROWS_WITH(run("flash_attention", f), ContainsSubstring("attention_mask"));
  Tensor f32 = Tensor::empty({p.b, p.hq, p.sq, p.sk}, DType::f32);
  f.set("attention_mask", f32.view());
  CHECK_THROWS_WITH(run("flash_attention", f), ContainsSubstring("attention_mask"));
  Tensor heads = Tensor::empty({p.b, 3, p.sq, p.sk}, DType::u8);
  f.set("attention_mask", heads.view());
  CHECK_THROWS_WITH(run("flash_attention", f), ContainsSubstring("attention_mask"));
}

TEST_CASE("the dense mask changes the result: the kernel and the reference read it", "[flash][dmask][cpu]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT: the dense-mask variants are not built in");
  Case c = make_case(masked(DType::f32, {0.3}), 950);
  Args unmasked = c.scalars;
  for (const auto& [n, t] : c.inputs)
    if (n == "q" || n == "k" || n == "v") unmasked.set(n, t.view());
  const Mismatch apart = compare(c.get("out"), find(reference("flash_attention", unmasked), "out").values);
  CHECK(apart.rel_l2 > 0.1);  // the masked kernel's output is far from the unmasked reference
  CHECK(compare(c.get("out"), find(reference("flash_attention", c.forward_args()), "out").values).rel_l2 <= 1e-5);
}
