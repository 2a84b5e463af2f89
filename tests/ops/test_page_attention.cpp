// page_attention through the generic API: a randomized matrix over block sizes (1 to 64), context
// lengths (0, 1, partial and full blocks), GQA ratios (1:1 to 20:1, powers of two and not),
// windows, softcap, max_context_len, shuffled page tables with garbage past each context,
// padded queries and caches, f32/bf16/f16, on the CPU and (where a GPU can run) on CUDA with
// and without split-KV, against the float64 reference, which is itself checked against a dense
// softmax over contiguous copies of the pages. Bad metadata must name the argument.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <numeric>

#include "ejk/admin.h"
#include "ejk/core/error.h"
#include "op_case.h"
#include "paged_test_util.h"
#include "recurrent_problem.h"

using namespace ejk;
using paged_test::padded;
using recurrent_test::Buffer;
using recurrent_test::element;
using recurrent_test::poisoned;
using Catch::Matchers::ContainsSubstring;

namespace {

struct Problem {
  DType dtype = DType::f32;
  int64_t s = 3, hq = 4, hkv = 2, d = 8, bs = 4, mb = 5;
  std::vector<int32_t> lens;  // default: random in [0, mb * bs], the last full
  double softcap = 0;
  int64_t window = 0, max_context = -1, splits = -1;
  int64_t pad = 0;  // elements past D in every query and cache row
  std::string name() const {
    return fmt::format("{} s {} hq {} hkv {} d {} bs {} mb {} cap {} win {} maxctx {} splits {} pad {}",
                       dtype_name(dtype), s, hq, hkv, d, bs, mb, softcap, window, max_context, splits, pad);
  }
};

struct Call {
  Buffer q, kc, vc, out;
  Tensor lens, tables;
  Args args() const {
    Args a;
    a.set("query", q.view), a.set("key_cache", kc.view), a.set("value_cache", vc.view);
    a.set("context_lens", lens.view()), a.set("block_tables", tables.view()), a.set("out", out.view);
    return a;
  }
};

void set_scalars(const Problem& p, Args& a) {
  if (p.softcap > 0) a.set("attn_logits_soft_cap", p.softcap);
  if (p.window > 0) a.set("sliding_window", p.window);
  if (p.max_context >= 0) a.set("max_context_len", p.max_context);
  if (p.splits >= 0) a.set("num_splits", p.splits);
}

// The first position a sequence of n cache positions sees: blocks before it are garbage too
// (a server may have freed them).
int64_t first(const Problem& p, int64_t n) {
  if (p.max_context >= 0) n = std::min(n, p.max_context);
  return p.window > 0 ? std::max<int64_t>(0, n - p.window) : 0;
}

Call make_call(const Problem& p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Call c;
  const int64_t nb = p.s * p.mb + 2;
  c.q = padded({p.s, p.hq, p.d}, p.dtype, p.pad, rng);
  c.kc = padded({nb, p.hkv, p.bs, p.d}, p.dtype, p.pad, rng);
  c.vc = padded({nb, p.hkv, p.bs, p.d}, p.dtype, p.pad, rng);
  c.out = poisoned({p.s, p.hq, p.d}, p.dtype);
  c.lens = Tensor::empty({p.s}, DType::i32);
  for (int64_t s = 0; s < p.s; ++s)
    c.lens.data_as<int32_t>()[s] = s < int64_t(p.lens.size()) ? p.lens[size_t(s)]
                                   : s == p.s - 1 ? int32_t(p.mb * p.bs)
                                                  : int32_t(std::uniform_int_distribution<int64_t>(0, p.mb * p.bs)(rng));
  // Blocks dealt out shuffled; entries past a sequence's context are garbage no one may read.
  std::vector<int32_t> blocks(static_cast<size_t>(nb));
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  c.tables = Tensor::empty({p.s, p.mb}, DType::i32);
  for (int64_t s = 0; s < p.s; ++s) {
    const int64_t n = c.lens.data_as<int32_t>()[s];
    for (int64_t j = 0; j < p.mb; ++j)
      c.tables.data_as<int32_t>()[s * p.mb + j] = j * p.bs < n && (j + 1) * p.bs > first(p, n)
                                                      ? blocks[size_t(s * p.mb + j)]
                                                      : -7 - int32_t(j);
  }
  return c;
}

// The float64 semantics from scratch: each sequence's visible positions gathered into a dense
// row, a plain softmax. Independent of the op's reference and of its params.
std::vector<double> dense_reference(const Problem& p, const Call& c) {
  std::vector<double> out(size_t(p.s * p.hq * p.d), 0.0);
  const double scale = double(float(1.0 / std::sqrt(double(p.d))));  // the op's f32 scalar
  for (int64_t s = 0; s < p.s; ++s) {
    int64_t n = c.lens.data_as<int32_t>()[s];
    if (p.max_context >= 0) n = std::min(n, p.max_context);
    const int64_t lo = first(p, n);
    for (int64_t h = 0; h < p.hq; ++h) {
      const int64_t g = h / (p.hq / p.hkv);
      auto at = [&](const Buffer& b, int64_t j, int64_t d) {
        const int64_t blk = c.tables.data_as<int32_t>()[s * p.mb + j / p.bs];
        const TensorView& v = b.view;
        return element(b.storage, blk * v.strides[0] + g * v.strides[1] + (j % p.bs) * v.strides[2] + d);
      };
      std::vector<double> w;
      for (int64_t j = lo; j < n; ++j) {
        double x = 0;
        for (int64_t d = 0; d < p.d; ++d) x += element(c.q.storage, s * c.q.view.strides[0] + h * c.q.view.strides[1] + d) * at(c.kc, j, d);
        x *= scale;
        if (p.softcap > 0) x = double(float(p.softcap)) * std::tanh(x / double(float(p.softcap)));
        w.push_back(x);
      }
      if (w.empty()) continue;
      const double m = *std::max_element(w.begin(), w.end());
      double sum = 0;
      for (double& x : w) sum += (x = std::exp(x - m));
      for (int64_t j = lo; j < n; ++j)
        for (int64_t d = 0; d < p.d; ++d)
          out[size_t((s * p.hq + h) * p.d + d)] += w[size_t(j - lo)] / sum * at(c.vc, j, d);
    }
  }
  return out;
}

// Runs p on `device` into a poisoned output and checks it against the op's reference, and that
// reference against the dense one.
void check_problem(const Problem& p, Device device, uint64_t seed) {
  Call c = make_call(p, seed);
  Args host = c.args();
  set_scalars(p, host);
  INFO(p.name());
  const std::vector<double> ref = paged_test::checked_reference("page_attention", host, dense_reference(p, c));

  Call on = c;  // the same views (sharing the host storage), their data on `device`
  if (device.kind != DeviceKind::cpu) {
    for (Buffer* b : {&on.q, &on.kc, &on.vc, &on.out}) paged_test::move_to(*b, device);
    for (Tensor* t : {&on.lens, &on.tables}) *t = t->to(device);
  }
  Args a = on.args();
  set_scalars(p, a);
  const RunInfo info = run("page_attention", a);
  synchronize(device);
  const Tensor got = on.out.storage.to(Device{});
  paged_test::check_output(c.out, got, ref, p.dtype, fmt::format("{} -> {}", p.name(), info.key));
}

// The randomized matrix: sizes and features drawn per problem, lengths 0 and 1 always present.
std::vector<Problem> matrix(DType dtype, int64_t d, int count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t block_sizes[] = {1, 3, 4, 16, 64};
  const int64_t groups[][2] = {{1, 1}, {4, 1}, {8, 2}, {12, 2}, {6, 1}, {20, 1}, {5, 5}};
  std::vector<Problem> v;
  for (int i = 0; i < count; ++i) {
    Problem p;
    p.dtype = dtype, p.d = d;
    p.bs = block_sizes[rng() % 5];
    p.mb = int64_t(1 + rng() % (p.bs >= 16 ? 4 : 24));
    const auto& g = groups[rng() % 7];
    p.hq = g[0], p.hkv = g[1];
    p.s = int64_t(3 + rng() % 4);
    p.lens = {0, 1};
    if (rng() % 3 == 0) p.softcap = 5.0 + double(rng() % 20);
    if (rng() % 3 == 0) p.window = int64_t(1 + rng() % (p.mb * p.bs));
    if (rng() % 5 == 0) p.max_context = int64_t(rng() % (p.mb * p.bs + 1));
    if (rng() % 4 == 0) p.pad = 8;
    v.push_back(p);
  }
  return v;
}

bool jit_or_builtin(int64_t d, DType t) {
  return cpu_jit_available() || ((d == 64 || d == 128) && (t == DType::f32 || t == DType::bf16));
}

}  // namespace

TEST_CASE("page_attention matches the float64 reference on the CPU (built-in sizes)", "[page_attention]") {
  uint64_t seed = 1;
  for (DType t : {DType::f32, DType::bf16})
    for (int64_t d : {64, 128})
      for (const Problem& p : matrix(t, d, 6, seed++)) check_problem(p, Device{}, seed++);
}

TEST_CASE("page_attention: other head dims and f16 through the JIT", "[page_attention]") {
  if (!jit_or_builtin(8, DType::f16)) SKIP("this build has no CPU JIT (EJK_ENABLE_ORC_JIT=OFF)");
  uint64_t seed = 100;
  for (const Problem& p : matrix(DType::f32, 8, 10, seed++)) check_problem(p, Device{}, seed++);
  for (const Problem& p : matrix(DType::f16, 40, 4, seed++)) check_problem(p, Device{}, seed++);
}

TEST_CASE("page_attention: an empty batch, and a query head count of 0", "[page_attention]") {
  Problem p;
  p.d = 64, p.s = 0, p.lens = {};
  check_problem(p, Device{}, 7);
}

TEST_CASE("page_attention: bad metadata and shapes are refused, naming the argument", "[page_attention]") {
  Problem p;
  p.d = 64;
  auto refused = [&](const Call& c, const char* what, const Problem& pp) {
    Args a = c.args();
    set_scalars(pp, a);
    INFO(what);
    REQUIRE_THROWS_WITH(run("page_attention", a), ContainsSubstring(what));
  };
  {
    Call c = make_call(p, 3);
    c.lens.data_as<int32_t>()[1] = int32_t(p.mb * p.bs + 1);
    refused(c, "context_lens[1]", p);
    c.lens.data_as<int32_t>()[1] = -1;
    refused(c, "context_lens[1]", p);
  }
  {
    Call c = make_call(p, 4);
    c.tables.data_as<int32_t>()[(p.s - 1) * p.mb] = int32_t(p.s * p.mb + 2);  // past the cache
    refused(c, "block_tables[2, 0]", p);
    c.tables.data_as<int32_t>()[(p.s - 1) * p.mb] = -1;
    refused(c, "block_tables[2, 0]", p);
  }
  {
    Problem q = p;
    q.hq = 3;
    refused(make_call(q, 5), "multiple of key_cache", q);
  }
  for (const auto& [scalar, value] : {std::pair<const char*, Scalar>{"attn_logits_soft_cap", -1.0},
                                      {"sliding_window", int64_t{0}}, {"max_context_len", int64_t{-1}}}) {
    Call c = make_call(p, 6);
    Args a = c.args();
    a.set(scalar, value);
    REQUIRE_THROWS_WITH(run("page_attention", a), ContainsSubstring(scalar));
  }
}

TEST_CASE("page_attention on CUDA matches the float64 reference, with and without split-KV", "[page_attention][cuda]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  const Device gpu{DeviceKind::cuda, 0};
  uint64_t seed = 500;
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (int64_t d : {64, 128, 40})
      for (Problem p : matrix(t, d, 4, seed++)) {
        check_problem(p, gpu, seed++);
        p.splits = 1 + int64_t(seed % 5);  // split-KV forced on (and off at 1)
        check_problem(p, gpu, seed++);
      }
  Problem big;  // long contexts and few sequences: the heuristic's split
  big.dtype = DType::bf16, big.d = 128, big.s = 2, big.hq = 32, big.hkv = 8, big.bs = 16, big.mb = 200;
  check_problem(big, gpu, 9);
}
