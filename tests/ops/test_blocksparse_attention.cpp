// blocksparse_attention and its backward through the public API on the CPU: random block layouts
// at 10-50% density (shared and per head), causal + window, segment ids, sinks, soft cap, GQA and
// MQA with head counts that are no multiple of 16, in f32 and bf16, outputs and every gradient
// against the float64 reference. Also: fully masked query blocks, keys of unlisted blocks never
// read (NaN there changes nothing), a full layout equal to flash_attention, the reference's
// gradients against finite differences of its forward, and bad input naming the argument.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>

#include "blocksparse_problem.h"
#include "ejk/admin.h"
#include "ejk/core/error.h"
#include "ejk/op.h"

using namespace ejk;
using namespace ejk::test;
using Catch::Matchers::ContainsSubstring;

namespace {

// The problems below take variants beyond the built-in set (block sizes, flags, head dims).
void require_cpu_jit() {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT (EJK_ENABLE_ORC_JIT=OFF): these variants are not built in");
}

// Forward out and lse, checked against the reference; returns them.
std::pair<Tensor, Tensor> check_forward(const Problem& p, Inputs& in) {
  Tensor out = Tensor::empty({p.b, p.hq, p.sq, p.d}, p.dtype), lse = Tensor::empty({p.b, p.hq, p.sq}, DType::f32);
  std::memset(out.data(), 0xff, out.nbytes());  // NaN: an element left unwritten fails
  std::memset(lse.data(), 0xff, lse.nbytes());
  Args args = in.args;
  args.set("out", out.view()).set("lse", lse.view());
  run("blocksparse_attention", args);
  const auto refs = reference("blocksparse_attention", in.args);
  const double tol = p.dtype == DType::f32 ? 1e-5 : 1e-2;
  INFO(p.name());
  CHECK(rel_l2(values_of(out), ref_of(refs, "out")) <= tol);
  CHECK(rel_l2(values_of(lse), ref_of(refs, "lse")) <= tol);
  return {out, lse};
}

void check_backward(const Problem& p, Inputs& in, const Tensor& out, const Tensor& lse, std::mt19937_64& rng) {
  Tensor d_out = random_tensor(out.shape(), p.dtype, rng);
  Args args = in.args;
  args.set("out", out.view()).set("lse", lse.view()).set("d_out", d_out.view());
  const Args ref_args = args;
  std::map<std::string, Tensor> grads;
  grads["dq"] = Tensor::empty(in.t["q"].shape(), p.dtype);
  grads["dk"] = Tensor::empty(in.t["k"].shape(), p.dtype);
  grads["dv"] = Tensor::empty(in.t["v"].shape(), p.dtype);
  if (p.sinks > 0) grads["dsoftmax_aux"] = Tensor::empty({p.hq, p.sinks}, DType::f32);
  for (auto& [name, g] : grads) {
    std::memset(g.data(), 0xff, g.nbytes());
    args.set(name, g.view());
  }
  run("blocksparse_attention_backward", args);
  const auto refs = reference("blocksparse_attention_backward", ref_args);
  const double tol = p.dtype == DType::f32 ? 1e-5 : 2e-2;
  INFO(p.name());
  for (auto& [name, g] : grads) {
    INFO(name);
    CHECK(rel_l2(values_of(g), ref_of(refs, name)) <= tol);
  }
}

}  // namespace

TEST_CASE("random block layouts match the float64 reference, outputs and gradients", "[blocksparse][cpu]") {
  require_cpu_jit();
  std::mt19937_64 rng(20261203);
  std::vector<Problem> problems;
  for (double density : {0.1, 0.3, 0.5})
    for (bool per_head : {false, true}) {
      Problem p;
      p.density = density, p.per_head = per_head;
      problems.push_back(p);
    }
  Problem causal_window;  // GQA 12 / 4: heads no multiple of 16
  causal_window.hq = 12, causal_window.hkv = 4, causal_window.causal = true;
  causal_window.window_left = 40, causal_window.window_right = 0, causal_window.sq = causal_window.sk = 160;
  causal_window.bq = 64, causal_window.bk = 32;
  problems.push_back(causal_window);
  Problem mqa;  // MQA, per-head layouts, segments, sinks, soft cap, odd lengths
  mqa.hq = 6, mqa.hkv = 1, mqa.per_head = true, mqa.segments = true, mqa.sinks = 2, mqa.softcap = true;
  mqa.sq = 83, mqa.sk = 117, mqa.bq = 16, mqa.bk = 48, mqa.d = 32, mqa.density = 0.4;
  problems.push_back(mqa);
  Problem window;  // a two-sided window without causal, no layout (the masks alone)
  window.density = -1, window.window_left = 17, window.window_right = 9, window.b = 2, window.hq = 3, window.hkv = 3;
  problems.push_back(window);
  for (DType dtype : {DType::f32, DType::bf16})
    for (Problem p : problems) {
      p.dtype = dtype;
      Inputs in = make_inputs(p, rng);
      auto [out, lse] = check_forward(p, in);
      check_backward(p, in, out, lse, rng);
    }
}

TEST_CASE("a fully masked query block gives zeros, lse -inf or the sinks' log-sum-exp", "[blocksparse][cpu]") {
  require_cpu_jit();
  std::mt19937_64 rng(7);
  for (int64_t sinks : {0, 3}) {
    Problem p;
    p.sinks = sinks, p.density = 1.0;
    Inputs in = make_inputs(p, rng);  // the last query block row of plane 0 is empty
    auto [out, lse] = check_forward(p, in);
    const int64_t first = (p.sq / p.bq - 1) * p.bq;  // sq is a multiple of bq here
    for (int64_t h = 0; h < p.hq; ++h) {
      double want_lse = -kInf;
      if (sinks > 0) {
        double m = -kInf, l = 0;
        const float* s = in.t["softmax_aux"].data_as<float>() + h * sinks;
        for (int64_t t = 0; t < sinks; ++t) m = std::max(m, double(s[t]));
        for (int64_t t = 0; t < sinks; ++t) l += std::exp(double(s[t]) - m);
        want_lse = m + std::log(l);
      }
      for (int64_t i = first; i < p.sq; ++i) {
        for (int64_t c = 0; c < p.d; ++c) REQUIRE(out.data_as<float>()[(h * p.sq + i) * p.d + c] == 0.0f);
        const float got = lse.data_as<float>()[h * p.sq + i];
        if (sinks == 0) REQUIRE(got == -std::numeric_limits<float>::infinity());
        else REQUIRE(std::abs(double(got) - want_lse) <= 1e-5 * std::abs(want_lse) + 1e-6);
      }
    }
    check_backward(p, in, out, lse, rng);
  }
}

TEST_CASE("keys of blocks the layout never lists are never read", "[blocksparse][cpu]") {
  require_cpu_jit();
  std::mt19937_64 rng(11);
  Problem p;
  p.density = 0.5, p.per_head = true, p.causal = true, p.sq = p.sk = 128;
  Inputs in = make_inputs(p, rng);
  // Key block 1 listed nowhere; its K and V rows NaN.
  const int64_t nq = p.sq / p.bq, nk = p.sk / p.bk;
  auto* m = in.t["block_mask"].data_as<uint8_t>();
  for (int64_t r = 0; r < p.b * p.hq * nq; ++r) m[r * nk + 1] = 0;
  for (const char* name : {"k", "v"})
    for (int64_t h = 0; h < p.hkv; ++h)
      for (int64_t j = p.bk; j < 2 * p.bk; ++j)
        for (int64_t c = 0; c < p.d; ++c)
          in.t[name].data_as<float>()[(h * p.sk + j) * p.d + c] = std::numeric_limits<float>::quiet_NaN();
  // The reference reads every key, masked or not: compare against one with zeros there instead.
  Inputs zeroed = in;
  for (const char* name : {"k", "v"}) {
    Tensor copy = Tensor::empty(in.t[name].shape(), p.dtype);
    std::memcpy(copy.data(), in.t[name].data(), copy.nbytes());
    for (int64_t i = 0; i < copy.numel(); ++i)
      if (std::isnan(copy.data_as<float>()[i])) copy.data_as<float>()[i] = 0.0f;
    zeroed.t[name] = copy;
    zeroed.args.set(name, copy.view());
  }
  Tensor out = Tensor::empty({p.b, p.hq, p.sq, p.d}, p.dtype), lse = Tensor::empty({p.b, p.hq, p.sq}, DType::f32);
  Args args = in.args;
  args.set("out", out.view()).set("lse", lse.view());
  run("blocksparse_attention", args);
  const auto refs = reference("blocksparse_attention", zeroed.args);
  CHECK(rel_l2(values_of(out), ref_of(refs, "out")) <= 1e-5);
  // The gradients of those keys are exactly 0, the others finite.
  Tensor d_out = random_tensor(out.shape(), p.dtype, rng);
  Tensor dq = Tensor::empty(in.t["q"].shape(), p.dtype), dk = Tensor::empty(in.t["k"].shape(), p.dtype),
         dv = Tensor::empty(in.t["v"].shape(), p.dtype);
  Args bwd = in.args;
  bwd.set("out", out.view()).set("lse", lse.view()).set("d_out", d_out.view());
  bwd.set("dq", dq.view()).set("dk", dk.view()).set("dv", dv.view());
  run("blocksparse_attention_backward", bwd);
  for (const Tensor* g : {&dq, &dk, &dv})
    for (int64_t i = 0; i < g->numel(); ++i) REQUIRE(std::isfinite(g->data_as<float>()[i]));
  for (const Tensor* g : {&dk, &dv})
    for (int64_t h = 0; h < p.hkv; ++h)
      for (int64_t j = p.bk; j < 2 * p.bk; ++j)
        for (int64_t c = 0; c < p.d; ++c) REQUIRE(g->data_as<float>()[(h * p.sk + j) * p.d + c] == 0.0f);
}

TEST_CASE("every block listed is flash attention", "[blocksparse][cpu]") {
  require_cpu_jit();
  std::mt19937_64 rng(3);
  Problem p;
  p.density = 1.0, p.causal = true, p.hq = 4, p.hkv = 2, p.sq = p.sk = 112, p.bq = p.bk = 16;
  Inputs in = make_inputs(p, rng);
  std::memset(in.t["block_mask"].data(), 1, in.t["block_mask"].nbytes());
  auto [out, lse] = check_forward(p, in);
  // flash_attention takes [B, S, H, D]: the same memory through swapped strides.
  auto bshd = [](const Tensor& t) {
    TensorView v = t.view();
    v.shape = {t.shape()[0], t.shape()[2], t.shape()[1], t.shape()[3]};
    v.strides = {t.view().strides[0], t.view().strides[2], t.view().strides[1], t.view().strides[3]};
    return v;
  };
  Tensor fout = Tensor::empty(out.shape(), p.dtype), flse = Tensor::empty(lse.shape(), DType::f32);
  Args f;
  f.set("q", bshd(in.t["q"])).set("k", bshd(in.t["k"])).set("v", bshd(in.t["v"])).set("causal", true);
  f.set("out", bshd(fout)).set("lse", flse.view());
  run("flash_attention", f);
  CHECK(rel_l2(values_of(out), values_of(fout)) <= 1e-5);
  CHECK(rel_l2(values_of(lse), values_of(flse)) <= 1e-5);
}

TEST_CASE("the reference's gradients are the finite differences of its forward", "[blocksparse][cpu]") {
  std::mt19937_64 rng(5);
  Problem p;
  p.b = 1, p.hq = 2, p.hkv = 1, p.sq = 20, p.sk = 24, p.d = 8, p.bq = p.bk = 16, p.density = 0.7, p.per_head = true;
  p.causal = true, p.softcap = true, p.sinks = 1, p.dtype = DType::f32;
  Inputs in = make_inputs(p, rng);
  Tensor w = random_tensor({p.b, p.hq, p.sq, p.d}, DType::f32, rng), wl = random_tensor({p.b, p.hq, p.sq}, DType::f32, rng);
  // loss = sum(out * w) + sum(lse * wl), lse's finite entries only.
  auto loss = [&]() {
    const auto refs = reference("blocksparse_attention", in.args);
    const auto &o = ref_of(refs, "out"), &l = ref_of(refs, "lse");
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i) s += o[i] * double(w.data_as<float>()[i]);
    for (size_t i = 0; i < l.size(); ++i)
      if (std::isfinite(l[i])) s += l[i] * double(wl.data_as<float>()[i]);
    return s;
  };
  // The backward's reference with d_out = w, d_lse = wl (out and lse are not read by it).
  Tensor out = Tensor::empty(w.shape(), DType::f32), lse = Tensor::empty(wl.shape(), DType::f32);
  Args b = in.args;
  b.set("out", out.view()).set("lse", lse.view()).set("d_out", w.view()).set("d_lse", wl.view());
  Tensor dsa = Tensor::empty({p.hq, p.sinks}, DType::f32);
  b.set("dsoftmax_aux", dsa.view());
  const auto grads = reference("blocksparse_attention_backward", b);
  for (const char* name : {"q", "k", "v", "softmax_aux"}) {
    const auto& g = ref_of(grads, name == std::string("softmax_aux") ? "dsoftmax_aux" : std::string("d") + name);
    float* x = in.t[name].data_as<float>();
    for (int64_t i = 0; i < in.t[name].numel(); i += 7) {
      const float keep = x[i], h = 1e-2f;
      x[i] = keep + h;
      const double up = loss();
      x[i] = keep - h;
      const double down = loss();
      x[i] = keep;
      const double fd = (up - down) / (2.0 * double(h));
      INFO(name << "[" << i << "]: finite difference " << fd << ", reference " << g[size_t(i)]);
      CHECK(std::abs(fd - g[size_t(i)]) <= 2e-3 * (1.0 + std::abs(fd)));
    }
  }
}

TEST_CASE("bad block-sparse input names the argument", "[blocksparse][errors]") {
  std::mt19937_64 rng(9);
  Problem p;
  Inputs in = make_inputs(p, rng);
  Tensor out = Tensor::empty({p.b, p.hq, p.sq, p.d}, p.dtype), lse = Tensor::empty({p.b, p.hq, p.sq}, DType::f32);
  auto call = [&](Args a) {
    a.set("out", out.view()).set("lse", lse.view());
    run("blocksparse_attention", a);
  };
  Args a = in.args;
  a.set("q_blocksize", int64_t(48));  // a multiple of 16, but NQ no longer matches
  CHECK_THROWS_WITH(call(a), ContainsSubstring("block_mask: dim 2 (NQ) must be ceil(Sq / q_blocksize)"));
  a = in.args;
  a.set("kv_blocksize", int64_t(40));
  CHECK_THROWS_WITH(call(a), ContainsSubstring("kv_blocksize: must be a multiple of 16, got 40"));
  a = in.args;
  a.set("q_blocksize", int64_t(8));
  CHECK_THROWS_WITH(call(a), ContainsSubstring("q_blocksize"));
  Tensor wrong = Tensor::empty(in.t["block_mask"].shape(), DType::i32);
  a = in.args;
  a.set("block_mask", wrong.view());
  CHECK_THROWS_WITH(call(a), ContainsSubstring("block_mask"));
  Tensor k3 = Tensor::empty({p.b, 3, p.sk, p.d}, p.dtype), v3 = Tensor::empty({p.b, 3, p.sk, p.d}, p.dtype);
  a = in.args;
  a.set("k", k3.view()).set("v", v3.view());
  CHECK_THROWS_WITH(call(a), ContainsSubstring("must divide the number of q heads"));
  // More block pairs than the lists index: refused before any memory is touched.
  auto view = [](const Dims& shape) { return TensorView{nullptr, DType::bf16, Device{}, shape, contiguous_strides(shape)}; };
  Args big;
  big.set("q", view({1, 1, 1 << 20, 64})).set("k", view({1, 1, 1 << 20, 64})).set("v", view({1, 1, 1 << 20, 64}));
  big.set("q_blocksize", int64_t(16)).set("kv_blocksize", int64_t(16));
  CHECK_THROWS_WITH(variant_key("blocksparse_attention", big), ContainsSubstring("q_blocksize: 65536 x 65536 blocks"));
}
