// ragged_page_attention_v2 through the generic API: a randomized matrix of mixed batches (decode
// tokens, prefill chunks, empty query ranges, contexts shorter than a page), page sizes 1 to 32,
// GQA and MQA, windows, softcap, sinks, num_seqs below the tables' rows, tokens past every
// sequence, padded rows, shuffled page tables with garbage where no query reaches, f32 and bf16
// (and f16 on CUDA), into poisoned outputs, on the CPU and on CUDA (the metadata on the device
// too), against the op's float64 reference, which is itself checked against a dense softmax
// written from scratch. Bad metadata must name the argument.
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
  std::vector<int64_t> q_lens = {1, 0, 5, 1};
  int64_t spare_rows = 2, extra_tokens = 2;  // table rows past num_seqs, tokens past every sequence
  int64_t hq = 4, hkv = 2, d = 64, ps = 4, mb = 6, pad = 0;
  double softcap = 0;
  int64_t window = 0;
  bool sinks = false;
  std::string name() const {
    return fmt::format("{} seqs {} hq {} hkv {} d {} ps {} mb {} cap {} win {} sinks {} pad {}", dtype_name(dtype),
                       q_lens.size(), hq, hkv, d, ps, mb, softcap, window, sinks, pad);
  }
};

struct Call {
  Buffer q, kv, out;
  Tensor lens, tables, starts, num_seqs, sinks;
  Args args(const Problem& p) const {
    Args a;
    a.set("queries", q.view), a.set("kv_pages", kv.view), a.set("out", out.view);
    a.set("context_lens", lens.view()), a.set("block_tables", tables.view());
    a.set("query_start_loc", starts.view()), a.set("num_seqs", num_seqs.view());
    if (p.sinks) a.set("softmax_aux", sinks.view());
    if (p.softcap > 0) a.set("logits_soft_cap", p.softcap);
    if (p.window > 0) a.set("sliding_window", p.window);
    return a;
  }
};

int64_t tokens(const Problem& p) {
  return std::accumulate(p.q_lens.begin(), p.q_lens.end(), int64_t{0}) + p.extra_tokens;
}

Call make_call(const Problem& p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t n = int64_t(p.q_lens.size()), rows = n + p.spare_rows, np = rows * p.mb + 2;
  Call c;
  c.q = padded({tokens(p), p.hq, p.d}, p.dtype, p.pad, rng);
  c.kv = padded({np, p.ps, 2 * p.hkv, p.d}, p.dtype, p.pad, rng);
  c.out = poisoned({tokens(p), p.hq, p.d}, p.dtype);
  c.num_seqs = Tensor::empty({1}, DType::i32), c.sinks = Tensor::empty({p.hq}, DType::f32);
  cli::fill_normal(c.sinks, rng);
  c.num_seqs.data_as<int32_t>()[0] = int32_t(n);
  paged_test::RaggedMetadata m = paged_test::ragged_metadata(p.q_lens, p.spare_rows, p.ps, p.mb, p.window, {rows, p.mb}, rng);
  c.lens = m.lens, c.starts = m.starts, c.tables = m.tables;
  return c;
}

// The semantics from scratch: each query's visible positions gathered densely, a plain softmax
// with the sink in the denominator. Independent of the op's reference and its params.
std::vector<double> dense_reference(const Problem& p, const Call& c) {
  const int64_t T = tokens(p);
  std::vector<double> out(size_t(T * p.hq * p.d), 0.0);
  const double scale = double(float(1.0 / std::sqrt(double(p.d))));
  const TensorView& kv = c.kv.view;
  int64_t t = 0;
  for (size_t s = 0; s < p.q_lens.size(); ++s) {
    const int64_t n_q = p.q_lens[s], n_kv = c.lens.data_as<int32_t>()[s];
    for (int64_t i = 0; i < n_q; ++i, ++t) {
      const int64_t pos = n_kv - n_q + i, lo = p.window > 0 ? std::max<int64_t>(0, pos - p.window + 1) : 0;
      for (int64_t h = 0; h < p.hq; ++h) {
        const int64_t g = h / (p.hq / p.hkv);
        auto at = [&](int64_t j, int64_t which, int64_t d) {
          const int64_t page = c.tables.data_as<int32_t>()[int64_t(s) * p.mb + j / p.ps];
          return element(c.kv.storage, page * kv.strides[0] + (j % p.ps) * kv.strides[1] +
                                           (2 * g + which) * kv.strides[2] + d);
        };
        std::vector<double> w;
        double m = p.sinks ? double(c.sinks.data_as<float>()[h]) : -INFINITY;
        for (int64_t j = lo; j <= pos; ++j) {
          double x = 0;
          for (int64_t d = 0; d < p.d; ++d)
            x += element(c.q.storage, t * c.q.view.strides[0] + h * c.q.view.strides[1] + d) * at(j, 0, d);
          x *= scale;
          if (p.softcap > 0) x = double(float(p.softcap)) * std::tanh(x / double(float(p.softcap)));
          w.push_back(x), m = std::max(m, x);
        }
        if (w.empty()) continue;
        double sum = p.sinks ? std::exp(double(c.sinks.data_as<float>()[h]) - m) : 0.0;
        for (double& x : w) sum += (x = std::exp(x - m));
        for (int64_t j = lo; j <= pos; ++j)
          for (int64_t d = 0; d < p.d; ++d) out[size_t((t * p.hq + h) * p.d + d)] += w[size_t(j - lo)] / sum * at(j, 1, d);
      }
    }
  }
  return out;
}

// Runs p on `device` (every tensor there, the metadata too) into a poisoned output and checks
// it against the op's reference, and that reference against the dense one.
void check_problem(const Problem& p, uint64_t seed, Device device = Device{}) {
  Call c = make_call(p, seed);
  const Args host = c.args(p);
  INFO(p.name());
  const std::vector<double> ref = paged_test::checked_reference("ragged_page_attention_v2", host, dense_reference(p, c));
  Call on = c;  // the same views (sharing the host storage), their data on `device`
  if (device.kind != DeviceKind::cpu) {
    for (Buffer* b : {&on.q, &on.kv, &on.out}) paged_test::move_to(*b, device);
    for (Tensor* t : {&on.lens, &on.tables, &on.starts, &on.num_seqs, &on.sinks}) *t = t->to(device);
  }
  const RunInfo info = run("ragged_page_attention_v2", on.args(p));
  synchronize(device);
  paged_test::check_output(c.out, on.out.storage.to(Device{}), ref, p.dtype,
                           fmt::format("{} -> {}", p.name(), info.key));
}

std::vector<Problem> matrix(DType dtype, int64_t d, int count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t page_sizes[] = {1, 3, 4, 16, 32};
  const int64_t groups[][2] = {{1, 1}, {4, 1}, {8, 2}, {12, 2}, {6, 1}, {20, 1}, {5, 5}};
  std::vector<Problem> v;
  for (int i = 0; i < count; ++i) {
    Problem p;
    p.dtype = dtype, p.d = d;
    p.ps = page_sizes[rng() % 5];
    p.mb = int64_t(2 + rng() % (p.ps >= 16 ? 3 : 16));
    const auto& g = groups[rng() % 7];
    p.hq = g[0], p.hkv = g[1];
    p.q_lens = {1, 0};
    for (int64_t s = 0, n = int64_t(1 + rng() % 4); s < n; ++s)
      p.q_lens.push_back(rng() % 2 ? 1 : int64_t(rng() % std::min<int64_t>(p.mb * p.ps, 40) + 1));
    p.spare_rows = int64_t(rng() % 3), p.extra_tokens = int64_t(rng() % 3);
    if (rng() % 3 == 0) p.softcap = 5.0 + double(rng() % 20);
    if (rng() % 3 == 0) p.window = int64_t(1 + rng() % (p.mb * p.ps));
    p.sinks = rng() % 2 == 0;
    if (rng() % 4 == 0) p.pad = 8;
    v.push_back(p);
  }
  return v;
}

}  // namespace

TEST_CASE("ragged_page_attention_v2 matches the float64 reference on the CPU", "[ragged_page_attention_v2]") {
  uint64_t seed = 1;
  for (DType t : {DType::f32, DType::bf16})
    for (int64_t d : {64, 128})
      for (const Problem& p : matrix(t, d, 8, seed++)) check_problem(p, seed++);
}

TEST_CASE("ragged_page_attention_v2: no sequences, and no tokens", "[ragged_page_attention_v2]") {
  Problem p;
  p.q_lens = {}, p.extra_tokens = 3;  // every token belongs to no sequence: all 0
  check_problem(p, 7);
  p.q_lens = {0, 0}, p.extra_tokens = 0;
  check_problem(p, 8);
}

TEST_CASE("ragged_page_attention_v2 on CUDA matches the float64 reference", "[ragged_page_attention_v2][cuda]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  const Device gpu{DeviceKind::cuda, 0};
  uint64_t seed = 300;
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (int64_t d : {64, 128})
      for (const Problem& p : matrix(t, d, 8, seed++)) check_problem(p, seed++, gpu);
  Problem empty;
  empty.dtype = DType::bf16, empty.q_lens = {}, empty.extra_tokens = 3;  // every token gets 0
  check_problem(empty, 9, gpu);
}

TEST_CASE("ragged_page_attention_v2: bad metadata is refused, naming the argument", "[ragged_page_attention_v2]") {
  Problem p;
  auto refused = [&](const Call& c, const char* what) {
    INFO(what);
    REQUIRE_THROWS_WITH(run("ragged_page_attention_v2", c.args(p)), ContainsSubstring(what));
  };
  {
    Call c = make_call(p, 3);
    c.lens.data_as<int32_t>()[2] = 4;  // fewer positions than its 5 query tokens
    refused(c, "context_lens[2]");
    c.lens.data_as<int32_t>()[2] = int32_t(p.mb * p.ps + 1);
    refused(c, "context_lens[2]");
  }
  {
    Call c = make_call(p, 4);
    c.tables.data_as<int32_t>()[3 * p.mb + p.mb - 1] = 10'000;
    refused(c, fmt::format("block_tables[3, {}]", p.mb - 1).c_str());
  }
  {
    Call c = make_call(p, 5);
    c.starts.data_as<int32_t>()[3] = 0;
    refused(c, "query_start_loc[3]");
    c = make_call(p, 5);
    c.starts.data_as<int32_t>()[4] = int32_t(tokens(p) + 1);
    refused(c, "query_start_loc[4]");
  }
  {
    Call c = make_call(p, 6);
    c.num_seqs.data_as<int32_t>()[0] = int32_t(p.q_lens.size() + p.spare_rows + 1);
    refused(c, "num_seqs");
  }
  {
    Problem q = p;
    q.hq = 3;
    Call c = make_call(q, 7);
    INFO("multiple of Hkv");
    REQUIRE_THROWS_WITH(run("ragged_page_attention_v2", c.args(q)), ContainsSubstring("multiple of Hkv"));
  }
}
