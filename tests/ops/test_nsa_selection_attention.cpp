// nsa_selection_attention and its backward through the public API on the CPU: random block
// selections (own block, earlier and later blocks, empty slots, repeats), block counts, GQA
// groups wider than a task's 16 heads, f32 and bf16, outputs and every gradient against the
// float64 reference. Also: a repeated block is attended once, tokens without keys give 0 with
// lse -inf and no gradient, keys of blocks nobody selects are never read, the reference's
// gradients against finite differences of its forward, and bad input naming the argument.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>

#include "blocksparse_problem.h"
#include "ejk/core/error.h"
#include "ejk/op.h"

using namespace ejk;
using namespace ejk::test;
using Catch::Matchers::ContainsSubstring;

namespace {

struct Nsa {
  int64_t b = 1, t = 150, hq = 4, hkv = 2, d = 64, s = 3, bs = 64;
  bool counts = false;
  DType dtype = DType::f32;
};

struct NsaInputs {
  std::map<std::string, Tensor> t;
  Args args;
  void set_all() {
    for (auto& [name, x] : t) args.set(name, x.view());
  }
};

// Slot 0 the token's own block (mostly), the others any block of the sequence or -1.
NsaInputs make(const Nsa& p, std::mt19937_64& rng) {
  NsaInputs in;
  in.t["q"] = random_tensor({p.b, p.t, p.hq, p.d}, p.dtype, rng);
  in.t["k"] = random_tensor({p.b, p.t, p.hkv, p.d}, p.dtype, rng);
  in.t["v"] = random_tensor({p.b, p.t, p.hkv, p.d}, p.dtype, rng);
  Tensor idx = Tensor::empty({p.b, p.t, p.hkv, p.s}, DType::i32);
  const int64_t blocks = (p.t + p.bs - 1) / p.bs;
  std::uniform_int_distribution<int32_t> any(-1, int32_t(blocks - 1));
  std::bernoulli_distribution own(0.9);
  for (int64_t row = 0; row < p.b * p.t * p.hkv; ++row)
    for (int64_t s = 0; s < p.s; ++s)
      idx.data_as<int32_t>()[row * p.s + s] = s == 0 && own(rng) ? int32_t(row / p.hkv % p.t / p.bs) : any(rng);
  in.t["block_indices"] = idx;
  if (p.counts) {
    Tensor c = Tensor::empty({p.b, p.t, p.hkv}, DType::i32);
    std::uniform_int_distribution<int32_t> count(0, int32_t(p.s));
    for (int64_t i = 0; i < c.numel(); ++i) c.data_as<int32_t>()[i] = count(rng);
    in.t["block_counts"] = c;
  }
  in.set_all();
  in.args.set("block_size", p.bs);
  return in;
}

std::pair<Tensor, Tensor> forward(const Nsa& p, const Args& in) {
  Tensor out = Tensor::empty({p.b, p.t, p.hq, p.d}, p.dtype), lse = Tensor::empty({p.b, p.t, p.hq}, DType::f32);
  std::memset(out.data(), 0xff, out.nbytes());  // NaN: an element left unwritten fails
  std::memset(lse.data(), 0xff, lse.nbytes());
  Args args = in;
  args.set("out", out.view()).set("lse", lse.view());
  run("nsa_selection_attention", args);
  return {out, lse};
}

std::map<std::string, Tensor> backward(const Nsa& p, const Args& in, const Tensor& out, const Tensor& lse,
                                       const Tensor& d_out, Args* ref_args = nullptr) {
  Args args = in;
  args.set("out", out.view()).set("lse", lse.view()).set("d_out", d_out.view());
  if (ref_args) *ref_args = args;
  std::map<std::string, Tensor> g;
  g["dq"] = Tensor::empty({p.b, p.t, p.hq, p.d}, p.dtype);
  g["dk"] = Tensor::empty({p.b, p.t, p.hkv, p.d}, p.dtype);
  g["dv"] = Tensor::empty({p.b, p.t, p.hkv, p.d}, p.dtype);
  for (auto& [name, x] : g) {
    std::memset(x.data(), 0xff, x.nbytes());
    args.set(name, x.view());
  }
  run("nsa_selection_attention_backward", args);
  return g;
}

}  // namespace

TEST_CASE("random selections match the float64 reference, outputs and gradients", "[nsa][cpu]") {
  std::mt19937_64 rng(20261203);
  std::vector<Nsa> problems;
  for (DType dt : {DType::f32, DType::bf16}) {
    Nsa a;  // T no multiple of the block, GQA 2
    a.dtype = dt;
    problems.push_back(a);
    Nsa b;  // MQA group of 20 (two row tasks), block counts, d128
    b.t = 129, b.hq = 20, b.hkv = 1, b.d = 128, b.s = 4, b.counts = true, b.dtype = dt;
    problems.push_back(b);
    Nsa c;  // two sequences, one slot
    c.b = 2, c.t = 64, c.hq = 2, c.hkv = 1, c.s = 1, c.dtype = dt;
    problems.push_back(c);
  }
  for (const Nsa& p : problems) {
    INFO("t " << p.t << " hq " << p.hq << " hkv " << p.hkv << " d " << p.d << " s " << p.s << " "
              << dtype_name(p.dtype));
    NsaInputs in = make(p, rng);
    auto [out, lse] = forward(p, in.args);
    const double tol = p.dtype == DType::f32 ? 1e-5 : 1e-2, gtol = p.dtype == DType::f32 ? 1e-5 : 2e-2;
    const auto refs = reference("nsa_selection_attention", in.args);
    CHECK(rel_l2(values_of(out), ref_of(refs, "out")) <= tol);
    CHECK(rel_l2(values_of(lse), ref_of(refs, "lse")) <= tol);
    Tensor d_out = random_tensor(out.shape(), p.dtype, rng);
    Args ref_args;
    auto g = backward(p, in.args, out, lse, d_out, &ref_args);
    const auto grefs = reference("nsa_selection_attention_backward", ref_args);
    for (auto& [name, x] : g) {
      INFO(name);
      CHECK(rel_l2(values_of(x), ref_of(grefs, name)) <= gtol);
    }
  }
}

TEST_CASE("a block selected twice is attended once", "[nsa][cpu]") {
  std::mt19937_64 rng(3);
  Nsa p;
  p.t = 192, p.s = 4;
  NsaInputs in = make(p, rng);
  // Every token: its own block, block 0, its own again, block 0 again.
  int32_t* idx = in.t["block_indices"].data_as<int32_t>();
  for (int64_t row = 0; row < p.t * p.hkv; ++row) {
    const int32_t own = int32_t(row / p.hkv / p.bs);
    idx[row * 4 + 0] = own, idx[row * 4 + 1] = 0, idx[row * 4 + 2] = own, idx[row * 4 + 3] = 0;
  }
  auto [out, lse] = forward(p, in.args);
  Tensor d_out = random_tensor(out.shape(), p.dtype, rng);
  auto g = backward(p, in.args, out, lse, d_out);
  // The same selection without the repeats (-1 in their slots).
  NsaInputs once = in;
  Tensor idx1 = Tensor::empty(in.t["block_indices"].shape(), DType::i32);
  std::memcpy(idx1.data(), idx, idx1.nbytes());
  for (int64_t row = 0; row < p.t * p.hkv; ++row) {
    int32_t* r = idx1.data_as<int32_t>() + row * 4;
    r[2] = -1, r[3] = r[0] == 0 ? 9 : -1;  // 9: past every token's own block, ignored as well
  }
  once.args.set("block_indices", idx1.view());
  auto [out1, lse1] = forward(p, once.args);
  auto g1 = backward(p, once.args, out1, lse1, d_out);
  CHECK(values_of(out) == values_of(out1));
  CHECK(values_of(lse) == values_of(lse1));
  for (auto& [name, x] : g) {
    INFO(name);
    CHECK(values_of(x) == values_of(g1[name]));
  }
  CHECK(rel_l2(values_of(out), ref_of(reference("nsa_selection_attention", in.args), "out")) <= 1e-5);
}

TEST_CASE("a token without keys gives 0 and lse -inf, and no gradient", "[nsa][cpu]") {
  std::mt19937_64 rng(5);
  Nsa p;
  p.t = 100, p.counts = true;
  NsaInputs in = make(p, rng);
  int32_t* counts = in.t["block_counts"].data_as<int32_t>();
  for (int64_t i = 0; i < in.t["block_counts"].numel(); ++i) counts[i] = 0;
  auto [out, lse] = forward(p, in.args);
  for (double x : values_of(out)) REQUIRE(x == 0.0);
  for (double x : values_of(lse)) REQUIRE(x == -std::numeric_limits<double>::infinity());
  auto g = backward(p, in.args, out, lse, random_tensor(out.shape(), p.dtype, rng));
  for (auto& [name, x] : g)
    for (double y : values_of(x)) REQUIRE(y == 0.0);
}

TEST_CASE("keys of blocks no token selects are never read", "[nsa][cpu]") {
  std::mt19937_64 rng(11);
  Nsa p;
  p.t = 256, p.s = 2;
  NsaInputs in = make(p, rng);
  // Only blocks 0 and 3 are selected (3 by the tokens that can see it); NaN in blocks 1 and 2.
  int32_t* idx = in.t["block_indices"].data_as<int32_t>();
  for (int64_t i = 0; i < in.t["block_indices"].numel(); i += 2) idx[i] = 0, idx[i + 1] = 3;
  for (const char* name : {"k", "v"}) {
    float* x = in.t[name].data_as<float>();
    for (int64_t j = 64; j < 192; ++j)
      for (int64_t c = 0; c < p.hkv * p.d; ++c) x[j * p.hkv * p.d + c] = std::numeric_limits<float>::quiet_NaN();
  }
  auto [out, lse] = forward(p, in.args);
  for (double x : values_of(out)) REQUIRE(std::isfinite(x));
  auto g = backward(p, in.args, out, lse, random_tensor(out.shape(), p.dtype, rng));
  for (const char* name : {"dq", "dk", "dv"}) {
    const auto v = values_of(g[name]);
    for (size_t i = 0; i < v.size(); ++i) REQUIRE(std::isfinite(v[i]));
  }
  const auto dk = values_of(g["dk"]);
  for (int64_t j = 64; j < 192; ++j) REQUIRE(dk[size_t(j * p.hkv * p.d)] == 0.0);
}

TEST_CASE("the reference's gradients are the finite differences of its forward", "[nsa][cpu]") {
  std::mt19937_64 rng(7);
  Nsa p;
  p.t = 20, p.hq = 4, p.hkv = 2, p.d = 8, p.s = 3, p.bs = 4, p.counts = true;
  NsaInputs in = make(p, rng);
  Tensor w = random_tensor({p.b, p.t, p.hq, p.d}, DType::f32, rng), wl = random_tensor({p.b, p.t, p.hq}, DType::f32, rng);
  // loss = sum(out * w) + sum(lse * wl), lse's finite entries only.
  auto loss = [&]() {
    const auto refs = reference("nsa_selection_attention", in.args);
    const auto &o = ref_of(refs, "out"), &l = ref_of(refs, "lse");
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i) s += o[i] * double(w.data_as<float>()[i]);
    for (size_t i = 0; i < l.size(); ++i)
      if (std::isfinite(l[i])) s += l[i] * double(wl.data_as<float>()[i]);
    return s;
  };
  Tensor out = Tensor::empty(w.shape(), DType::f32), lse = Tensor::empty({p.b, p.t, p.hq}, DType::f32);
  Args b = in.args;
  b.set("out", out.view()).set("lse", lse.view()).set("d_out", w.view()).set("d_lse", wl.view());
  const auto grads = reference("nsa_selection_attention_backward", b);
  for (const char* name : {"q", "k", "v"}) {
    const auto& g = ref_of(grads, std::string("d") + name);
    float* x = in.t[name].data_as<float>();
    for (int64_t i = 0; i < in.t[name].numel(); ++i) {
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

TEST_CASE("bad NSA selection input names the argument", "[nsa][errors]") {
  std::mt19937_64 rng(9);
  Nsa p;
  p.hq = 3, p.hkv = 2;
  NsaInputs in = make(p, rng);
  Tensor out = Tensor::empty({p.b, p.t, p.hq, p.d}, p.dtype), lse = Tensor::empty({p.b, p.t, p.hq}, DType::f32);
  Args a = in.args;
  a.set("out", out.view()).set("lse", lse.view());
  CHECK_THROWS_WITH(run("nsa_selection_attention", a), ContainsSubstring("k: number of kv heads (2) must divide"));
  Tensor bad = Tensor::empty({p.b, p.t + 1, 2, p.s}, DType::i32);
  NsaInputs good = make(Nsa{}, rng);
  Tensor out2 = Tensor::empty({1, 150, 4, 64}, DType::f32), lse2 = Tensor::empty({1, 150, 4}, DType::f32);
  Args c = good.args;
  c.set("block_indices", bad.view()).set("out", out2.view()).set("lse", lse2.view());
  CHECK_THROWS_WITH(run("nsa_selection_attention", c), ContainsSubstring("block_indices"));
}
