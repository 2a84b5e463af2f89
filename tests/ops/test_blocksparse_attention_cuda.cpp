// blocksparse_attention and its backward on the CUDA backend through the public API: random block
// layouts at 10, 50 and 100% density (shared and per head) in bf16 and f16 with causal, window,
// segment ids, GQA, sinks (per head and shared) and soft cap against the float64 reference
// (outputs and every gradient); a fully masked query block; keys of unlisted blocks never read; a
// full layout equal to flash_attention on the GPU; block sizes the kernels do not take refused
// by name. Skips with the reason when no GPU can run here.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "blocksparse_problem.h"
#include "ejk/core/error.h"
#include "ejk/op.h"

using namespace ejk;
using namespace ejk::test;
using Catch::Matchers::ContainsSubstring;

namespace {

constexpr Device kGpu{DeviceKind::cuda, 0};

void require_gpu() {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
}

// A problem's inputs moved to the GPU, kept alive next to the Args that view them.
struct GpuInputs {
  std::vector<Tensor> keep;
  Args args;
};

GpuInputs on_gpu(const Inputs& in) {
  GpuInputs g;
  g.args = in.args;
  g.keep.reserve(in.t.size());
  for (const auto& [name, t] : in.t) {
    g.keep.push_back(t.to(kGpu));
    g.args.set(name, g.keep.back().view());
  }
  return g;
}

// The forward on the GPU into NaN-poisoned outputs; host copies of out and lse.
std::pair<Tensor, Tensor> run_on_gpu(const Problem& p, const Inputs& in) {
  GpuInputs g = on_gpu(in);
  Tensor out = Tensor::empty({p.b, p.hq, p.sq, p.d}, p.dtype), lse = Tensor::empty({p.b, p.hq, p.sq}, DType::f32);
  std::memset(out.data(), 0xff, out.nbytes());
  std::memset(lse.data(), 0xff, lse.nbytes());
  Tensor dout = out.to(kGpu), dlse = lse.to(kGpu);
  g.args.set("out", dout.view()).set("lse", dlse.view());
  const RunInfo info = run("blocksparse_attention", g.args);
  synchronize(kGpu);
  CHECK(info.backend == Backend::cuda);
  return {dout.to(Device{}), dlse.to(Device{})};
}

// Out and lse on the GPU against the float64 reference (bf16/f16: rel-L2 <= 1e-2).
std::pair<Tensor, Tensor> check_forward(const Problem& p, const Inputs& in) {
  auto [out, lse] = run_on_gpu(p, in);
  const auto refs = reference("blocksparse_attention", in.args);
  const double e_out = rel_l2(values_of(out), ref_of(refs, "out")), e_lse = rel_l2(values_of(lse), ref_of(refs, "lse"));
  INFO(p.name() << fmt::format(": rel_l2 out {:.3e} lse {:.3e}", e_out, e_lse));
  CHECK(e_out <= 1e-2);
  CHECK(e_lse <= 1e-2);
  return {out, lse};
}

// NaN-poisoned tensor of `shape` on the GPU: an element the kernels leave unwritten fails.
Tensor poisoned_on_gpu(const Dims& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  std::memset(t.data(), 0xff, t.nbytes());
  return t.to(kGpu);
}

// The backward on the GPU from the GPU forward's out and lse and a random d_out, against the
// float64 reference: dq, dk, dv (rel-L2 <= 2e-2) and dsoftmax_aux (within 2e-2 of its terms' size).
void check_backward(const Problem& p, const Inputs& in, std::mt19937_64& rng) {
  auto [out, lse] = run_on_gpu(p, in);
  const Tensor d_out = random_tensor(out.shape(), p.dtype, rng);
  GpuInputs g = on_gpu(in);
  const Tensor g_out = out.to(kGpu), g_lse = lse.to(kGpu), g_dout = d_out.to(kGpu);
  g.args.set("out", g_out.view()).set("lse", g_lse.view()).set("d_out", g_dout.view());
  std::map<std::string, Tensor> grads;
  for (const char* name : {"q", "k", "v"})
    grads[std::string("d") + name] = poisoned_on_gpu(in.t.at(name).shape(), p.dtype);
  if (p.sinks > 0) grads["dsoftmax_aux"] = poisoned_on_gpu(in.t.at("softmax_aux").shape(), DType::f32);
  for (auto& [name, t] : grads) g.args.set(name, t.view());
  const RunInfo info = run("blocksparse_attention_backward", g.args);
  synchronize(kGpu);
  CHECK(info.backend == Backend::cuda);
  Args ref = in.args;
  ref.set("out", out.view()).set("lse", lse.view()).set("d_out", d_out.view());
  const auto refs = reference("blocksparse_attention_backward", ref);
  for (auto& [name, t] : grads) {
    const std::vector<double> got = values_of(t.to(Device{}));
    const double e = rel_l2(got, ref_of(refs, name));
    INFO(p.name() << ": " << name << fmt::format(" rel_l2 {:.3e}", e));
    if (name == "dsoftmax_aux") {
      // Its terms cancel: the bound is relative to their size, not to the sum.
      CHECK(std::isfinite(e));
      CHECK(sinks_within(got, ref_of(refs, name), sink_term_sizes(p, in.t.at("softmax_aux"), out, lse, d_out), 2e-2));
    } else {
      CHECK(e <= 2e-2);
    }
  }
}

}  // namespace

TEST_CASE("CUDA block-sparse attention matches the float64 reference", "[blocksparse][cuda][gpu]") {
  require_gpu();
  std::mt19937_64 rng(20261204);
  std::vector<Problem> problems;
  // The kernel's own tiles (128 x 64 layout blocks), lengths no multiple of them.
  for (double density : {0.1, 0.5, 1.0})
    for (bool per_head : {false, true}) {
      Problem p;
      p.b = 2, p.hq = 4, p.hkv = 2, p.sq = 400, p.sk = 333, p.d = 128, p.bq = 128, p.bk = 64;
      p.density = density, p.per_head = per_head, p.causal = density < 1.0 && per_head;
      problems.push_back(p);
    }
  Problem gqa;  // GQA 12 / 4 (heads no multiple of 16), window, segment ids, sinks; 64 x 32 tiles
  gqa.b = 2, gqa.hq = 12, gqa.hkv = 4, gqa.sq = 300, gqa.sk = 290, gqa.d = 64, gqa.bq = 64, gqa.bk = 32;
  gqa.density = 0.5, gqa.per_head = true, gqa.window_left = 70, gqa.window_right = 20, gqa.segments = true;
  gqa.sinks = 2;
  problems.push_back(gqa);
  Problem mqa;  // MQA, causal with soft cap, layout blocks larger than the kernel's tiles
  mqa.b = 1, mqa.hq = 6, mqa.hkv = 1, mqa.sq = mqa.sk = 520, mqa.d = 64, mqa.bq = 128, mqa.bk = 128;
  mqa.density = 0.3, mqa.causal = true, mqa.softcap = true;
  problems.push_back(mqa);
  Problem shared;  // shared sinks, no layout (the masks alone): causal and segments
  shared.b = 2, shared.hq = 4, shared.hkv = 4, shared.sq = shared.sk = 256, shared.d = 128, shared.bq = 128;
  shared.bk = 64, shared.density = -1, shared.causal = true, shared.segments = true, shared.sinks = 3;
  shared.shared_sinks = true;
  problems.push_back(shared);
  for (DType dtype : {DType::bf16, DType::f16})
    for (Problem p : problems) {
      p.dtype = dtype;
      const Inputs in = make_inputs(p, rng);
      check_forward(p, in);
    }
}

TEST_CASE("CUDA block-sparse attention backward matches the float64 reference", "[blocksparse][cuda][gpu]") {
  require_gpu();
  std::mt19937_64 rng(20261205);
  std::vector<Problem> problems;
  for (double density : {0.1, 0.5, 1.0}) {  // the kernels' 64 x 64 tiles in 128 x 128 blocks
    Problem p;
    p.b = 2, p.hq = 4, p.hkv = 2, p.sq = 400, p.sk = 333, p.d = 128, p.bq = 128, p.bk = 128;
    p.density = density, p.per_head = density < 1.0, p.causal = density == 0.5;
    problems.push_back(p);
  }
  Problem gqa;  // GQA 12 / 4, window, segment ids, per-head sinks, soft cap; 64 x 64 blocks
  gqa.b = 2, gqa.hq = 12, gqa.hkv = 4, gqa.sq = 300, gqa.sk = 290, gqa.d = 64, gqa.bq = 64, gqa.bk = 64;
  gqa.density = 0.5, gqa.per_head = true, gqa.window_left = 70, gqa.window_right = 20, gqa.segments = true;
  gqa.sinks = 2, gqa.softcap = true;
  problems.push_back(gqa);
  Problem mqa;  // MQA with shared sinks, causal and segments, no layout (the masks alone)
  mqa.b = 1, mqa.hq = 6, mqa.hkv = 1, mqa.sq = mqa.sk = 256, mqa.d = 128, mqa.bq = 64, mqa.bk = 128;
  mqa.density = -1, mqa.causal = true, mqa.segments = true, mqa.sinks = 3, mqa.shared_sinks = true;
  problems.push_back(mqa);
  for (DType dtype : {DType::bf16, DType::f16})
    for (Problem p : problems) {
      p.dtype = dtype;
      const Inputs in = make_inputs(p, rng);
      check_backward(p, in, rng);
    }
}

TEST_CASE("CUDA: a fully masked query block gives zeros, lse -inf or the sinks' log-sum-exp",
          "[blocksparse][cuda][gpu]") {
  require_gpu();
  std::mt19937_64 rng(8);
  for (int64_t sinks : {0, 2}) {
    Problem p;
    p.b = 1, p.hq = 2, p.hkv = 1, p.sq = p.sk = 256, p.d = 128, p.bq = 128, p.bk = 64, p.density = 1.0;
    p.sinks = sinks, p.dtype = DType::bf16;
    const Inputs in = make_inputs(p, rng);  // the last query block row of plane 0 is empty
    auto [out, lse] = check_forward(p, in);
    const std::vector<double> o = values_of(out);
    for (int64_t h = 0; h < p.hq; ++h) {
      double want = -kInf;
      if (sinks > 0) {
        double m = -kInf, l = 0;
        const float* s = in.t.at("softmax_aux").data_as<float>() + h * sinks;
        for (int64_t t = 0; t < sinks; ++t) m = std::max(m, double(s[t]));
        for (int64_t t = 0; t < sinks; ++t) l += std::exp(double(s[t]) - m);
        want = m + std::log(l);
      }
      for (int64_t i = p.sq - p.bq; i < p.sq; ++i) {
        for (int64_t c = 0; c < p.d; ++c) REQUIRE(o[size_t((h * p.sq + i) * p.d + c)] == 0.0);
        const float got = lse.data_as<float>()[h * p.sq + i];
        if (sinks == 0) REQUIRE(got == -std::numeric_limits<float>::infinity());
        else REQUIRE(std::abs(double(got) - want) <= 1e-5 * std::abs(want) + 1e-5);
      }
    }
  }
}

TEST_CASE("CUDA: keys of blocks the layout never lists are never read", "[blocksparse][cuda][gpu]") {
  require_gpu();
  std::mt19937_64 rng(12);
  Problem p;
  p.b = 1, p.hq = 2, p.hkv = 1, p.sq = p.sk = 256, p.d = 128, p.bq = 128, p.bk = 64, p.density = 0.6;
  p.per_head = true, p.dtype = DType::bf16;
  Inputs in = make_inputs(p, rng);
  // Key block 1 listed nowhere; its K and V rows NaN there, zeros for the reference.
  const int64_t nq = p.sq / p.bq, nk = p.sk / p.bk;
  auto* m = in.t["block_mask"].data_as<uint8_t>();
  for (int64_t r = 0; r < p.b * p.hq * nq; ++r) m[r * nk + 1] = 0;
  Inputs zeroed = in;
  for (const char* name : {"k", "v"}) {
    Tensor nan = Tensor::empty(in.t[name].shape(), p.dtype), zero = Tensor::empty(in.t[name].shape(), p.dtype);
    std::memcpy(nan.data(), in.t[name].data(), nan.nbytes());
    std::memcpy(zero.data(), in.t[name].data(), zero.nbytes());
    auto* n16 = static_cast<uint16_t*>(nan.data());
    auto* z16 = static_cast<uint16_t*>(zero.data());
    for (int64_t h = 0; h < p.hkv; ++h)
      for (int64_t j = p.bk; j < 2 * p.bk; ++j)
        for (int64_t c = 0; c < p.d; ++c) n16[(h * p.sk + j) * p.d + c] = 0x7fc0, z16[(h * p.sk + j) * p.d + c] = 0;
    in.t[name] = nan, in.args.set(name, nan.view());
    zeroed.t[name] = zero, zeroed.args.set(name, zero.view());
  }
  auto [out, lse] = run_on_gpu(p, in);
  const auto refs = reference("blocksparse_attention", zeroed.args);
  CHECK(rel_l2(values_of(out), ref_of(refs, "out")) <= 1e-2);
  CHECK(rel_l2(values_of(lse), ref_of(refs, "lse")) <= 1e-2);
}

TEST_CASE("CUDA: every block listed is flash attention on the GPU", "[blocksparse][cuda][gpu]") {
  require_gpu();
  std::mt19937_64 rng(4);
  for (bool causal : {false, true}) {
    Problem p;
    p.b = 1, p.hq = 4, p.hkv = 2, p.sq = p.sk = 384, p.d = 128, p.bq = 128, p.bk = 64, p.density = 1.0;
    p.causal = causal, p.dtype = DType::bf16;
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
    Tensor q = in.t["q"].to(kGpu), k = in.t["k"].to(kGpu), v = in.t["v"].to(kGpu);
    Tensor fout = Tensor::empty(q.shape(), p.dtype, kGpu), flse = Tensor::empty(lse.shape(), DType::f32, kGpu);
    Args f;
    f.set("q", bshd(q)).set("k", bshd(k)).set("v", bshd(v)).set("causal", causal);
    f.set("out", bshd(fout)).set("lse", flse.view());
    CHECK(run("flash_attention", f).backend == Backend::cuda);
    synchronize(kGpu);
    INFO("causal " << causal);
    CHECK(rel_l2(values_of(out), values_of(fout.to(Device{}))) <= 1e-2);
    CHECK(rel_l2(values_of(lse), values_of(flse.to(Device{}))) <= 1e-3);
  }
}

TEST_CASE("CUDA: block sizes the kernels do not take are refused by name", "[blocksparse][cuda][gpu][errors]") {
  require_gpu();
  std::mt19937_64 rng(13);
  Problem p;
  p.b = 1, p.hq = 2, p.hkv = 2, p.sq = p.sk = 128, p.d = 64, p.bq = 32, p.bk = 32, p.dtype = DType::bf16;
  const Inputs in = make_inputs(p, rng);
  CHECK_THROWS_WITH(run_on_gpu(p, in), ContainsSubstring("q_blocksize: 32 is not a multiple of the kernel's block_q"));
  p.bq = 64;  // the forward takes it; the backward's dK/dV tiles are 64 keys
  const Inputs back = make_inputs(p, rng);
  CHECK_THROWS_WITH(check_backward(p, back, rng), ContainsSubstring("kv_blocksize: 32 is not a multiple of the kernel's block_k"));
}
