// decode_attention through the generic API: page sizes 1 (the seed's default), 5, 16 and 64,
// contexts empty, shorter than a page and not multiples of it, GQA 1, 4, 6 and 8, softcap,
// shuffled pages with garbage where no query reaches, f32 and bf16 (f16 too on CUDA), into
// poisoned outputs, on the CPU and on CUDA, against the op's float64 reference, which is itself
// checked against a dense softmax written from scratch (out and lse; -inf exactly for an empty
// context). Bad arguments must be named.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cmath>
#include <numeric>

#include "ejk/admin.h"
#include "ejk/core/error.h"
#include "op_case.h"
#include "paged_test_util.h"
#include "recurrent_problem.h"

using namespace ejk;
using paged_test::rel_l2;
using recurrent_test::Buffer;
using recurrent_test::compare;
using recurrent_test::element;
using recurrent_test::poisoned;
using Catch::Matchers::ContainsSubstring;

namespace {

struct Problem {
  DType dtype = DType::f32;
  int64_t b = 4, hq = 8, hkv = 2, d = 64, ps = 16, mp = 4;
  double softcap = 0;
  std::string name() const {
    return fmt::format("{} b {} hq {} hkv {} d {} ps {} mp {} cap {}", dtype_name(dtype), b, hq, hkv, d, ps, mp,
                       softcap);
  }
};

struct Call {
  Tensor q, k, v, tables, lens;
  Buffer out, lse;
  int64_t page_size = 1;
  Args args(const Problem& p) const {
    Args a;
    a.set("query", q.view()), a.set("key_buffer", k.view()), a.set("value_buffer", v.view());
    a.set("req_to_tokens", tables.view()), a.set("seq_lens", lens.view());
    a.set("out", out.view), a.set("lse", lse.view), a.set("page_size", page_size);
    if (p.softcap > 0) a.set("logits_soft_cap", p.softcap);
    return a;
  }
};

Call make_call(const Problem& p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t pages = p.b * p.mp + 3, cap = p.mp * p.ps;
  Call c;
  c.page_size = p.ps;
  c.q = Tensor::empty({p.b, p.hq, p.d}, p.dtype);
  c.k = Tensor::empty({pages * p.ps, p.hkv, p.d}, p.dtype), c.v = Tensor::empty({pages * p.ps, p.hkv, p.d}, p.dtype);
  for (Tensor* t : {&c.q, &c.k, &c.v}) cli::fill_normal(*t, rng);
  c.out = poisoned({p.b, p.hq, p.d}, p.dtype), c.lse = poisoned({p.b, p.hq}, DType::f32);
  c.lens = Tensor::empty({p.b}, DType::i32);
  auto* len = c.lens.data_as<int32_t>();
  for (int64_t s = 0; s < p.b; ++s) len[s] = int32_t(std::uniform_int_distribution<int64_t>(0, cap)(rng));
  len[0] = 0;                                              // empty
  if (p.b > 1) len[1] = int32_t(std::min(cap, p.ps + 1));  // one past a page
  if (p.b > 2) len[p.b - 1] = int32_t(cap);                // full
  std::vector<int32_t> perm(static_cast<size_t>(pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  c.tables = Tensor::empty({p.b, p.mp}, DType::i32);
  for (int64_t s = 0; s < p.b; ++s)
    for (int64_t j = 0; j < p.mp; ++j)
      c.tables.data_as<int32_t>()[s * p.mp + j] = j * p.ps < len[s] ? perm[size_t(s * p.mp + j)] : -7 - int32_t(j);
  return c;
}

// From scratch: each sequence's positions gathered through the table, a plain softmax.
void dense_reference(const Problem& p, const Call& c, std::vector<double>& out, std::vector<double>& lse) {
  out.assign(size_t(p.b * p.hq * p.d), 0.0), lse.assign(size_t(p.b * p.hq), -INFINITY);
  const double scale = double(float(1.0 / std::sqrt(double(p.d)))), cap = double(float(p.softcap));
  for (int64_t s = 0; s < p.b; ++s) {
    const int64_t n = c.lens.data_as<int32_t>()[s];
    for (int64_t h = 0; h < p.hq; ++h) {
      const int64_t g = h / (p.hq / p.hkv);
      auto row = [&](int64_t j) {
        return (c.tables.data_as<int32_t>()[s * p.mp + j / p.ps] * p.ps + j % p.ps) * p.hkv * p.d + g * p.d;
      };
      std::vector<double> x(static_cast<size_t>(n));
      double m = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < p.d; ++d) dot += element(c.q, (s * p.hq + h) * p.d + d) * element(c.k, row(j) + d);
        dot *= scale;
        if (p.softcap > 0) dot = cap * std::tanh(dot / cap);
        x[size_t(j)] = dot, m = std::max(m, dot);
      }
      if (n == 0) continue;
      double sum = 0;
      for (double& e : x) sum += (e = std::exp(e - m));
      lse[size_t(s * p.hq + h)] = m + std::log(sum);
      for (int64_t j = 0; j < n; ++j)
        for (int64_t d = 0; d < p.d; ++d)
          out[size_t((s * p.hq + h) * p.d + d)] += x[size_t(j)] / sum * element(c.v, row(j) + d);
    }
  }
}

// lse from its poisoned host buffer: infinities where the reference has them, else rel-L2.
void check_lse(const Tensor& host, const std::vector<double>& want, double tol) {
  std::vector<double> got(want.size());
  for (size_t i = 0; i < want.size(); ++i) got[i] = double(host.data_as<float>()[recurrent_test::kFence + int64_t(i)]);
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("lse " << i << ": " << got[i] << " vs " << want[i]);
    REQUIRE_FALSE(std::isnan(got[i]));
    REQUIRE(std::isfinite(got[i]) == std::isfinite(want[i]));
    if (!std::isfinite(want[i])) REQUIRE(got[i] == want[i]);
  }
  CHECK(rel_l2(got, want) <= tol);
}

void check_problem(const Problem& p, uint64_t seed, Device device = Device{}) {
  Call c = make_call(p, seed);
  INFO(p.name());
  const std::vector<ReferenceOutput> ref = reference("decode_attention", c.args(p));
  REQUIRE(ref.size() == 2);
  std::vector<double> dense_out, dense_lse;
  dense_reference(p, c, dense_out, dense_lse);
  CHECK(rel_l2(ref[0].values, dense_out) <= 1e-12);
  for (size_t i = 0; i < dense_lse.size(); ++i)
    CHECK((std::isfinite(dense_lse[i]) ? std::abs(ref[1].values[i] - dense_lse[i]) <= 1e-12
                                       : ref[1].values[i] == dense_lse[i]));
  Call on = c;
  if (device.kind != DeviceKind::cpu) {
    for (Tensor* t : {&on.q, &on.k, &on.v, &on.tables, &on.lens}) *t = t->to(device);
    for (Buffer* b : {&on.out, &on.lse}) paged_test::move_to(*b, device);
  }
  const RunInfo info = run("decode_attention", on.args(p));
  synchronize(device);
  const double tol = p.dtype == DType::f32 ? 1e-5 : 1e-2;
  paged_test::check_output(c.out, on.out.storage.to(Device{}), ref[0].values, p.dtype, info.key + " out");
  check_lse(on.lse.storage.to(Device{}), ref[1].values, tol);
  // The lse buffer's fences (compare's values are unused here: lse may hold -inf).
  CHECK(compare(c.lse, on.lse.storage.to(Device{}), std::vector<double>(ref[1].values.size(), 0.0)).fence_intact);
}

std::vector<Problem> matrix(DType dtype, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t groups[][2] = {{4, 4}, {8, 2}, {8, 1}, {12, 2}};
  std::vector<Problem> v;
  for (int64_t ps : {1, 5, 16, 64})
    for (const auto& g : groups) {
      Problem p;
      p.dtype = dtype, p.ps = ps, p.hq = g[0], p.hkv = g[1], p.d = rng() % 2 ? 64 : 128;
      p.mp = ps == 1 ? int64_t(30 + rng() % 40) : ps == 64 ? 2 : int64_t(2 + rng() % 5);
      p.b = int64_t(3 + rng() % 3);
      if (rng() % 2) p.softcap = 5.0 + double(rng() % 20);
      v.push_back(p);
    }
  return v;
}

}  // namespace

TEST_CASE("decode_attention matches the float64 reference on the CPU", "[decode_attention]") {
  uint64_t seed = 11;
  for (DType t : {DType::f32, DType::bf16})
    for (const Problem& p : matrix(t, seed++)) check_problem(p, seed++);
}

TEST_CASE("decode_attention on CUDA matches the float64 reference", "[decode_attention][cuda]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  const Device gpu{DeviceKind::cuda, 0};
  uint64_t seed = 400;
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (const Problem& p : matrix(t, seed++)) check_problem(p, seed++, gpu);
}

TEST_CASE("decode_attention: bad arguments are refused, naming them", "[decode_attention]") {
  Problem p;
  auto refused = [&](const Call& c, const std::string& what) {
    INFO(what);
    REQUIRE_THROWS_WITH(run("decode_attention", c.args(p)), ContainsSubstring(what));
  };
  {
    Call c = make_call(p, 3);
    c.lens.data_as<int32_t>()[2] = int32_t(p.mp * p.ps + 1);
    refused(c, "seq_lens[2]");
    c.lens.data_as<int32_t>()[2] = -1;
    refused(c, "seq_lens[2]");
  }
  {
    Call c = make_call(p, 4);
    c.lens.data_as<int32_t>()[3] = int32_t(p.mp * p.ps);
    c.tables.data_as<int32_t>()[3 * p.mp + p.mp - 1] = 10'000;
    refused(c, fmt::format("req_to_tokens[3, {}]", p.mp - 1));
  }
  {
    Call c = make_call(p, 5);
    c.page_size = 7;  // key_buffer's rows are not a multiple of it
    refused(c, "multiple of page_size = 7");
  }
  {
    Problem q = p;
    q.hq = 3;
    Call c = make_call(q, 6);
    INFO("multiple of key_buffer");
    REQUIRE_THROWS_WITH(run("decode_attention", c.args(q)), ContainsSubstring("multiple of key_buffer"));
  }
}
