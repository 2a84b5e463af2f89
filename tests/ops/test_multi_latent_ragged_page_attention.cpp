// multi_latent_ragged_page_attention through the generic API: a randomized matrix of mixed
// batches (decode tokens, prefill chunks, empty query ranges, contexts shorter than a page),
// page sizes 1 to 32, 8, 16, 20 and 128 query heads, windows, softcap, q/k/v scales, sequences
// processed below the tables' rows, tokens past every sequence, padded query rows, shuffled page
// tables with garbage where no query reaches, NaN in the cache's padding and in the slots of
// this call's tokens (the op reads those from keys_values and keys_pe), f32, bf16 and f16, into
// poisoned outputs, against the op's float64 reference, which is itself checked against a
// dense softmax written from scratch; on CUDA too where there is a GPU (16-bit only). Bad
// metadata and shapes must name the argument.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cmath>
#include <limits>
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
  int64_t spare_rows = 2, extra_tokens = 2;  // table rows past the processed ones, tokens past every sequence
  int64_t hq = 8, r = 512, e = 64, ps = 4, mb = 6, pad = 0;
  double softcap = 0, q_scale = 0, k_scale = 0, v_scale = 0;  // 0: not given
  int64_t window = 0;
  int64_t pack() const { return dtype == DType::f32 ? 1 : 2; }
  int64_t kd() const { return (r + 127) / 128 * 128 + (e + 127) / 128 * 128; }
  std::string name() const {
    return fmt::format("{} seqs {} hq {} r {} e {} ps {} mb {} cap {} win {} scales {} {} {} pad {}", dtype_name(dtype),
                       q_lens.size(), hq, r, e, ps, mb, softcap, window, q_scale, k_scale, v_scale, pad);
  }
};

void set_nan(Tensor& t, int64_t i) {
  if (t.dtype() == DType::f32) t.data_as<float>()[i] = std::numeric_limits<float>::quiet_NaN();
  else t.data_as<uint16_t>()[i] = 0x7fff;  // a NaN in bf16 and in f16
}

struct Call {
  Buffer qn, qp, kc, kp, out;
  Tensor cache, lens, tables, starts, dist;
  Args args(const Problem& p) const {
    Args a;
    a.set("queries_nope", qn.view), a.set("queries_pe", qp.view), a.set("keys_values", kc.view);
    a.set("keys_pe", kp.view), a.set("kv_cache", cache.view()), a.set("out", out.view);
    a.set("kv_lens", lens.view()), a.set("block_tables", tables.view());
    a.set("query_start_loc", starts.view()), a.set("distribution", dist.view());
    if (p.softcap > 0) a.set("logits_soft_cap", p.softcap);
    if (p.window > 0) a.set("sliding_window", p.window);
    if (p.q_scale > 0) a.set("q_scale", p.q_scale);
    if (p.k_scale > 0) a.set("k_scale", p.k_scale);
    if (p.v_scale > 0) a.set("v_scale", p.v_scale);
    return a;
  }
};

int64_t tokens(const Problem& p) {
  return std::accumulate(p.q_lens.begin(), p.q_lens.end(), int64_t{0}) + p.extra_tokens;
}

// Element offset of slot `slot` of page `page` in the cache.
int64_t row_offset(const Problem& p, const Tensor& cache, int64_t page, int64_t slot) {
  const Dims& st = cache.view().strides;
  return page * st[0] + (slot / p.pack()) * st[1] + (slot % p.pack()) * st[2];
}

void fill_metadata(const Problem& p, Call& c, std::mt19937_64& rng) {
  const int64_t n = int64_t(p.q_lens.size()), rows = n + p.spare_rows;
  c.dist = Tensor::empty({3}, DType::i32);
  c.dist.data_as<int32_t>()[0] = 1, c.dist.data_as<int32_t>()[1] = 2, c.dist.data_as<int32_t>()[2] = int32_t(n);
  paged_test::RaggedMetadata m = paged_test::ragged_metadata(p.q_lens, p.spare_rows, p.ps, p.mb, p.window, {rows * p.mb}, rng);
  c.lens = m.lens, c.starts = m.starts, c.tables = m.tables;
}

Call make_call(const Problem& p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t n = int64_t(p.q_lens.size()), rows = n + p.spare_rows, np = rows * p.mb + 2, T = tokens(p);
  Call c;
  c.qn = padded({T, p.hq, p.r}, p.dtype, p.pad, rng), c.qp = padded({T, p.hq, p.e}, p.dtype, p.pad, rng);
  c.kc = padded({T, p.r}, p.dtype, p.pad, rng), c.kp = padded({T, p.e}, p.dtype, p.pad, rng);
  c.out = poisoned({T, p.hq, p.r}, p.dtype);
  c.cache = Tensor::empty({np, (p.ps + p.pack() - 1) / p.pack(), p.pack(), p.kd()}, p.dtype);
  cli::fill_normal(c.cache, rng);
  fill_metadata(p, c, rng);
  // NaN where the op must not read: the rows' padding, and the slots of this call's tokens.
  const int64_t pe_off = (p.r + 127) / 128 * 128;
  for (int64_t pg = 0; pg < np; ++pg)
    for (int64_t slot = 0; slot < p.ps; ++slot) {
      const int64_t o = row_offset(p, c.cache, pg, slot);
      for (int64_t d = p.r; d < pe_off; ++d) set_nan(c.cache, o + d);
      for (int64_t d = pe_off + p.e; d < p.kd(); ++d) set_nan(c.cache, o + d);
    }
  for (int64_t s = 0; s < n; ++s) {
    const int64_t n_kv = c.lens.data_as<int32_t>()[s], n_q = p.q_lens[size_t(s)];
    for (int64_t j = n_kv - n_q; j < n_kv; ++j) {
      const int64_t pg = c.tables.data_as<int32_t>()[s * p.mb + j / p.ps];
      for (int64_t d = 0; d < p.kd(); ++d) set_nan(c.cache, row_offset(p, c.cache, pg, j % p.ps) + d);
    }
  }
  return c;
}

// The semantics from scratch: each query's visible positions gathered densely ([c, k_pe] from
// the cache or from this call's keys), a plain softmax, the weighted sum of the c rows.
std::vector<double> dense_reference(const Problem& p, const Call& c) {
  const int64_t T = tokens(p), pe_off = (p.r + 127) / 128 * 128;
  std::vector<double> out(size_t(T * p.hq * p.r), 0.0);
  double scale = double(float(1.0 / std::sqrt(double(p.r + p.e))));
  if (p.q_scale > 0) scale *= p.q_scale;
  if (p.k_scale > 0) scale *= p.k_scale;
  scale = double(float(scale));
  const double vs = p.v_scale > 0 ? p.v_scale : 1.0, cap = double(float(p.softcap));
  int64_t t = 0;
  for (size_t s = 0; s < p.q_lens.size(); ++s) {
    const int64_t n_q = p.q_lens[s], n_kv = c.lens.data_as<int32_t>()[s], ctx = n_kv - n_q, first = t;
    // Position j's element d of [c, k_pe] (d < R: c, else k_pe[d - R]).
    auto kv = [&](int64_t j, int64_t d) {
      if (j >= ctx) {
        const int64_t tok = first + j - ctx;
        return d < p.r ? element(c.kc.storage, tok * c.kc.view.strides[0] + d)
                       : element(c.kp.storage, tok * c.kp.view.strides[0] + d - p.r);
      }
      const int64_t page = c.tables.data_as<int32_t>()[int64_t(s) * p.mb + j / p.ps];
      return element(c.cache, row_offset(p, c.cache, page, j % p.ps) + (d < p.r ? d : pe_off + d - p.r));
    };
    for (int64_t i = 0; i < n_q; ++i, ++t) {
      const int64_t pos = ctx + i, lo = p.window > 0 ? std::max<int64_t>(0, pos - p.window + 1) : 0;
      for (int64_t h = 0; h < p.hq; ++h) {
        std::vector<double> w;
        double m = -INFINITY;
        for (int64_t j = lo; j <= pos; ++j) {
          double x = 0;
          for (int64_t d = 0; d < p.r; ++d)
            x += element(c.qn.storage, t * c.qn.view.strides[0] + h * c.qn.view.strides[1] + d) * kv(j, d);
          for (int64_t d = 0; d < p.e; ++d)
            x += element(c.qp.storage, t * c.qp.view.strides[0] + h * c.qp.view.strides[1] + d) * kv(j, p.r + d);
          x *= scale;
          if (p.softcap > 0) x = cap * std::tanh(x / cap);
          w.push_back(x), m = std::max(m, x);
        }
        double sum = 0;
        for (double& x : w) sum += (x = std::exp(x - m));
        for (int64_t j = lo; j <= pos; ++j)
          for (int64_t d = 0; d < p.r; ++d) out[size_t((t * p.hq + h) * p.r + d)] += vs * w[size_t(j - lo)] / sum * kv(j, d);
      }
    }
  }
  return out;
}

// Runs p on `device` (every tensor there, the metadata too) into a poisoned output and checks
// it against the op's reference, and that reference against the dense one.
void check_problem(const Problem& p, uint64_t seed, Device device = Device{}) {
  Call c = make_call(p, seed);
  const Args args = c.args(p);
  INFO(p.name());
  const std::vector<double> ref = paged_test::checked_reference("multi_latent_ragged_page_attention", args, dense_reference(p, c));
  Call on = c;  // the same views (sharing the host storage), their data on `device`
  if (device.kind != DeviceKind::cpu) {
    for (Buffer* b : {&on.qn, &on.qp, &on.kc, &on.kp, &on.out}) paged_test::move_to(*b, device);
    for (Tensor* t : {&on.cache, &on.lens, &on.tables, &on.starts, &on.dist}) *t = t->to(device);
  }
  const RunInfo info = run("multi_latent_ragged_page_attention", on.args(p));
  synchronize(device);
  paged_test::check_output(c.out, on.out.storage.to(Device{}), ref, p.dtype,
                           fmt::format("{} -> {}", p.name(), info.key));
}

std::vector<Problem> matrix(DType dtype, int count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t page_sizes[] = {1, 3, 4, 16, 32}, heads[] = {8, 16, 20, 128};
  std::vector<Problem> v;
  for (int i = 0; i < count; ++i) {
    Problem p;
    p.dtype = dtype;
    p.ps = page_sizes[rng() % 5];
    if (dtype != DType::f32 && p.ps % 2 != 0) p.ps += 1;  // two 16-bit slots share a packed row
    p.mb = int64_t(2 + rng() % (p.ps >= 16 ? 3 : 12));
    p.hq = heads[rng() % 4];
    p.q_lens = {1, 0};
    for (int64_t s = 0, n = int64_t(1 + rng() % (p.hq == 128 ? 2 : 4)); s < n; ++s)
      p.q_lens.push_back(rng() % 2 ? 1 : int64_t(rng() % std::min<int64_t>(p.mb * p.ps, p.hq == 128 ? 9 : 30) + 1));
    p.spare_rows = int64_t(rng() % 3), p.extra_tokens = int64_t(rng() % 3);
    if (rng() % 3 == 0) p.softcap = 5.0 + double(rng() % 20);
    if (rng() % 3 == 0) p.window = int64_t(1 + rng() % (p.mb * p.ps));
    if (rng() % 4 == 0) p.q_scale = 0.75, p.k_scale = 1.25, p.v_scale = 0.5;
    if (rng() % 4 == 0) p.pad = 8;
    v.push_back(p);
  }
  return v;
}

}  // namespace

TEST_CASE("multi_latent_ragged_page_attention matches the float64 reference on the CPU", "[mla_page]") {
  uint64_t seed = 1;
  for (DType t : {DType::f32, DType::bf16})
    for (const Problem& p : matrix(t, t == DType::f32 ? 8 : 5, seed++)) check_problem(p, seed++);
}

// f16 is outside the CPU AOT set (f32, bf16).
TEST_CASE("multi_latent_ragged_page_attention matches the float64 reference on the CPU, f16 (JIT)", "[mla_page]") {
  if (!cpu_jit_available()) SKIP("no CPU JIT in this build");
  uint64_t seed = 3;
  for (const Problem& p : matrix(DType::f16, 5, seed++)) check_problem(p, seed++);
}

TEST_CASE("multi_latent_ragged_page_attention on CUDA matches the float64 reference", "[mla_page][cuda]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  const Device gpu{DeviceKind::cuda, 0};
  uint64_t seed = 300;
  for (DType t : {DType::bf16, DType::f16})
    for (const Problem& p : matrix(t, 8, seed++)) check_problem(p, seed++, gpu);
  Problem p;
  p.dtype = DType::bf16, p.r = 128, p.e = 32, p.hq = 20, p.window = 6;  // other dims: NVRTC
  check_problem(p, 9, gpu);
  p.q_lens = {}, p.extra_tokens = 3;  // every token gets 0
  check_problem(p, 10, gpu);
}

TEST_CASE("multi_latent_ragged_page_attention: other latent and rope dims (JIT)", "[mla_page]") {
  if (!cpu_jit_available()) SKIP("no CPU JIT in this build");
  Problem p;
  p.r = 96, p.e = 16, p.hq = 20, p.window = 6;
  check_problem(p, 11);
  p.dtype = DType::bf16, p.r = 130, p.e = 130, p.hq = 8, p.window = 0, p.softcap = 9;
  check_problem(p, 12);
}

TEST_CASE("multi_latent_ragged_page_attention: no sequences, and no tokens", "[mla_page]") {
  Problem p;
  p.q_lens = {}, p.extra_tokens = 3;  // every token belongs to no sequence: all 0
  check_problem(p, 7);
  p.q_lens = {0, 0}, p.extra_tokens = 0;
  check_problem(p, 8);
}

TEST_CASE("multi_latent_ragged_page_attention: bad metadata and shapes are refused, naming the argument",
          "[mla_page]") {
  Problem p;
  auto refused = [&](const Call& c, const std::string& what, const Problem& q) {
    INFO(what);
    REQUIRE_THROWS_WITH(run("multi_latent_ragged_page_attention", c.args(q)), ContainsSubstring(what));
  };
  {
    Call c = make_call(p, 3);
    c.lens.data_as<int32_t>()[2] = 4;  // fewer positions than its 5 query tokens
    refused(c, "kv_lens[2]", p);
    c.lens.data_as<int32_t>()[2] = int32_t(p.mb * p.ps + 1);
    refused(c, "kv_lens[2]", p);
  }
  {
    Call c = make_call(p, 4);
    c.tables.data_as<int32_t>()[3 * p.mb] = 10'000;  // sequence 3's first page, which a query reads
    refused(c, fmt::format("block_tables[{}] (sequence 3, page 0)", 3 * p.mb), p);
  }
  {
    Call c = make_call(p, 5);
    c.starts.data_as<int32_t>()[3] = 0;
    refused(c, "query_start_loc[3]", p);
    c = make_call(p, 5);
    c.starts.data_as<int32_t>()[4] = int32_t(tokens(p) + 1);
    refused(c, "query_start_loc[4]", p);
  }
  {
    Call c = make_call(p, 6);
    c.dist.data_as<int32_t>()[2] = int32_t(p.q_lens.size() + p.spare_rows + 1);
    refused(c, "distribution[2]", p);
  }
  {
    Call c = make_call(p, 7);
    c.tables = Tensor::empty({c.tables.numel() - 1}, DType::i32);
    refused(c, "block_tables: length", p);
  }
  {
    Call c = make_call(p, 8);
    c.cache = Tensor::empty({4, 2, 1, 640 - 128}, DType::f32);
    refused(c, "kv_cache: dim 3 (KD) must be align128(R) + align128(E)", p);
    c.cache = Tensor::empty({4, 2, 2, 640}, DType::f32);
    refused(c, "kv_cache: dim 2 (PK) must be 1", p);
  }
}
