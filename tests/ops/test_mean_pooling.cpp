// mean_pooling and mean_pooling_backward through the public API: random problems (every dtype,
// dense and varlen with empty sequences, one sequence, long ones, strided and misaligned
// tensors) on the CPU and, where a GPU can run, on CUDA, against the float64 reference. Outputs
// are written into poisoned (0xff: NaN) buffers wider than the output, so an element left
// unwritten fails the comparison and a write outside the output fails the fence check. Bad
// inputs must name the argument; the C functions return the same results and statuses.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "ejk/core/error.h"
#include "ejk/ejk.h"
#include "ejk/half.h"
#include "ejk/op.h"
#include "ejk/ops/mean_pooling.h"
#include "ejk/ops/mean_pooling_backward.h"
#include "host_case.h"

using namespace ejk;
using Catch::Matchers::ContainsSubstring;

namespace {

// How a tensor sits in its buffer: `offset` elements in (a non-zero offset breaks 16-byte
// alignment), rows `pad` elements apart beyond D, and for [B, T, D] optionally token-major
// ([T, B, D] in memory: `swap`).
struct Placement {
  int64_t offset = 0, pad = 0;
  bool swap = false;
};

// A strided view into a host buffer of its own.
struct Buffer {
  Tensor storage;  // 1-D
  TensorView view;

  // The same buffer on `device`: its storage copy (kept in `keep`) and the view into it.
  TensorView on(Device device, Tensor& keep) const {
    keep = device.kind == DeviceKind::cpu ? storage : storage.to(device);
    TensorView v = view;
    v.device = device;
    v.data = static_cast<char*>(keep.data()) + (static_cast<char*>(view.data) - static_cast<char*>(storage.data()));
    return v;
  }
};

// rng: random normal contents; none: every byte 0xff.
Buffer make_buffer(const Dims& shape, DType dtype, const Placement& pl, std::mt19937_64* rng) {
  Buffer b;
  const int64_t rank = shape.size(), inner = shape.back() + pl.pad;
  Dims strides = contiguous_strides(shape);
  if (rank >= 2) strides[rank - 2] = inner;
  if (rank == 3) strides[0] = pl.swap ? inner : shape[1] * inner + pl.pad;
  if (rank == 3 && pl.swap) strides[1] = shape[0] * inner;
  int64_t span = 1;
  for (int64_t i = 0; i < rank; ++i) span += shape[i] > 0 ? (shape[i] - 1) * strides[i] : 0;
  b.storage = Tensor::empty({pl.offset + span + 1}, dtype);
  if (rng) cli::fill_normal(b.storage, *rng);
  else std::memset(b.storage.data(), 0xff, b.storage.nbytes());
  b.view = {static_cast<char*>(b.storage.data()) + pl.offset * dtype_size(dtype), dtype, {}, shape, strides};
  return b;
}

double element(const Tensor& storage, int64_t i) {
  switch (storage.dtype()) {
    case DType::f32: return storage.data_as<float>()[i];
    case DType::bf16: return bf16_to_float(storage.data_as<uint16_t>()[i]);
    default: return f16_to_float(storage.data_as<uint16_t>()[i]);
  }
}

// The view's elements in row-major order, read from `storage` (a host copy of b's buffer); and
// whether every element of the buffer outside the view still holds the poison.
std::vector<double> read(const Buffer& b, const Tensor& storage, bool* fence_intact = nullptr) {
  const TensorView& v = b.view;
  const int64_t base =
      (static_cast<char*>(v.data) - static_cast<char*>(b.storage.data())) / int64_t(dtype_size(v.dtype));
  std::vector<bool> inside(size_t(storage.numel()), false);
  std::vector<double> out;
  std::vector<int64_t> idx(size_t(v.rank()), 0);
  for (int64_t n = 0; n < v.numel(); ++n) {
    int64_t at = base;
    for (int64_t d = 0; d < v.rank(); ++d) at += idx[size_t(d)] * v.strides[d];
    out.push_back(element(storage, at));
    inside[size_t(at)] = true;
    for (int64_t d = v.rank() - 1; d >= 0 && ++idx[size_t(d)] == v.shape[d]; --d) idx[size_t(d)] = 0;
  }
  if (fence_intact) {
    *fence_intact = true;
    const auto* bytes = static_cast<const unsigned char*>(storage.data());
    const size_t esize = dtype_size(storage.dtype());
    for (size_t i = 0; i < inside.size(); ++i)
      for (size_t k = 0; k < esize && !inside[i]; ++k) *fence_intact = *fence_intact && bytes[i * esize + k] == 0xff;
  }
  return out;
}

// rel-L2 against the reference; NaN, or an infinity, never passes.
struct Error {
  double rel_l2 = 0;
  bool nonfinite = false;
};
Error compare(const std::vector<double>& got, const std::vector<double>& ref) {
  Error e;
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) e.nonfinite = true;
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  e.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return e;
}
double tolerance(DType t) { return t == DType::f32 ? 1e-5 : 1e-2; }

// A problem: `seqs` sequences, dense of `tokens` each, or varlen packing `tokens` in all.
struct Problem {
  DType dtype = DType::f32;
  bool varlen = false;
  int64_t seqs = 1, tokens = 1, d = 1;
  std::vector<int32_t> cu;  // varlen
  Placement in, out;
  std::string name() const {
    return fmt::format("{} {} seqs {} tokens {} d {} in(off {} pad {} swap {}) out(off {} pad {})", dtype_name(dtype),
                       varlen ? "varlen" : "dense", seqs, tokens, d, in.offset, in.pad, in.swap, out.offset, out.pad);
  }
};

// Lengths summing to `total` over n sequences: empty ones anywhere (often), the rest random.
std::vector<int32_t> random_cu(int64_t n, int64_t total, std::mt19937_64& rng) {
  std::vector<int64_t> cuts{0, total};
  for (int64_t i = 1; i < n; ++i)
    cuts.push_back(std::bernoulli_distribution(0.3)(rng) ? cuts[size_t(i - 1) % cuts.size()]
                                                         : std::uniform_int_distribution<int64_t>(0, total)(rng));
  std::sort(cuts.begin(), cuts.end());
  return {cuts.begin(), cuts.end()};
}

Problem random_problem(std::mt19937_64& rng, DType dtype) {
  auto pick = [&](std::initializer_list<int64_t> v) {
    return *(v.begin() + std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng));
  };
  auto coin = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  Problem p;
  p.dtype = dtype;
  p.varlen = coin(0.5);
  p.seqs = pick({1, 1, 2, 3, 5, 8, 17});
  p.d = pick({1, 3, 8, 16, 40, 64, 100, 128, 256, 1030});
  const int64_t per = coin(0.1) ? std::uniform_int_distribution<int64_t>(2000, 9000)(rng)
                                : std::uniform_int_distribution<int64_t>(0, 300)(rng);
  p.tokens = p.varlen ? per * p.seqs / 2 + pick({0, 1}) : per;
  if (p.varlen) p.cu = random_cu(p.seqs, p.tokens, rng);
  if (coin(0.4)) p.in = {pick({0, 1, 3}), pick({0, 1, 8}), !p.varlen && coin(0.5)};
  if (coin(0.4)) p.out = {pick({0, 1}), pick({0, 2, 8}), false};
  return p;
}

Device gpu() { return {DeviceKind::cuda, 0}; }

struct Outcome {
  std::vector<double> got, ref;
  bool fence_intact = false;
  RunInfo info;
};

// Runs the forward (backward false) or the backward of p on `device` into a poisoned output.
Outcome run(const Problem& p, bool backward, Device device, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const Dims tokens_shape = p.varlen ? Dims{p.tokens, p.d} : Dims{p.seqs, p.tokens, p.d}, rows_shape{p.seqs, p.d};
  const Buffer in = make_buffer(backward ? rows_shape : tokens_shape, p.dtype, p.in, &rng);
  const Buffer out = make_buffer(backward ? tokens_shape : rows_shape, p.dtype, p.out, nullptr);
  Tensor cu;
  if (p.varlen) {
    cu = Tensor::empty({int64_t(p.cu.size())}, DType::i32);
    std::copy(p.cu.begin(), p.cu.end(), cu.data_as<int32_t>());
  }
  Tensor in_dev, out_dev, cu_dev;
  const TensorView in_view = in.on(device, in_dev), out_view = out.on(device, out_dev);
  std::optional<TensorView> cu_view;
  if (p.varlen) cu_view = device.kind == DeviceKind::cpu ? cu.view() : (cu_dev = cu.to(device)).view();
  Outcome o;
  o.info = backward ? mean_pooling_backward_into({in_view, cu_view}, {}, out_view)
                    : mean_pooling_into({in_view, cu_view}, out_view);
  synchronize(device);
  o.got = read(out, device.kind == DeviceKind::cpu ? out_dev : out_dev.to(Device{}), &o.fence_intact);
  Args args;
  args.set(backward ? "g" : "x", in.view);
  if (p.varlen) args.set("cu_seqlens", cu.view());
  if (backward) args.set("num_tokens", p.tokens);
  o.ref = reference(backward ? "mean_pooling_backward" : "mean_pooling", args).front().values;
  return o;
}

void check_outcome(const Problem& p, const Outcome& o, const std::string& what) {
  const Error e = compare(o.got, o.ref);
  INFO(fmt::format("{}: {} -> {}: rel_l2 {:.3e}", what, p.name(), o.info.key, e.rel_l2));
  CHECK_FALSE(e.nonfinite);
  CHECK(e.rel_l2 <= tolerance(p.dtype));
  CHECK(o.fence_intact);
  CHECK(o.got.size() == o.ref.size());
}

// Hand-picked problems: no tokens at all, every sequence empty, one sequence, empty ones first
// and last, one long sequence among short ones, many tiny sequences, single columns.
std::vector<Problem> edge_problems() {
  std::vector<Problem> v;
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    auto add = [&](bool varlen, int64_t seqs, int64_t tokens, int64_t d, std::vector<int32_t> cu = {}) {
      Problem p;
      p.dtype = t, p.varlen = varlen, p.seqs = seqs, p.tokens = tokens, p.d = d, p.cu = std::move(cu);
      v.push_back(p);
    };
    add(false, 3, 0, 64);                           // T = 0: means of nothing are 0
    add(false, 1, 1, 1);
    add(false, 1, 40000, 64);                       // one long dense sequence
    add(false, 64, 1, 24);
    add(true, 3, 0, 32, {0, 0, 0, 0});              // every sequence empty
    add(true, 1, 5, 8, {0, 5});                     // N = 1
    add(true, 4, 9, 16, {0, 0, 4, 9, 9});           // empty first and last
    add(true, 3, 60003, 72, {0, 3, 60000, 60003});  // one long among short ones
    std::vector<int32_t> tiny{0};
    for (int i = 0; i < 3000; ++i) tiny.push_back(tiny.back() + i % 4);
    add(true, 3000, tiny.back(), 40, tiny);         // many tiny sequences
    add(true, 2, 7, 1, {0, 7, 7});
  }
  return v;
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

Tensor host(const Dims& shape, DType dtype = DType::f32) {
  Tensor t = Tensor::empty(shape, dtype);
  std::mt19937_64 rng(1);
  if (is_floating(dtype)) cli::fill_normal(t, rng);
  else std::memset(t.data(), 0, t.nbytes());
  return t;
}

Tensor cu_tensor(std::vector<int32_t> v) {
  Tensor t = Tensor::empty({int64_t(v.size())}, DType::i32);
  std::copy(v.begin(), v.end(), t.data_as<int32_t>());
  return t;
}

}  // namespace

TEST_CASE("mean pooling on the CPU matches the float64 reference", "[mean_pooling][cpu]") {
  std::mt19937_64 rng(2024);
  for (int i = 0; i < 240; ++i) {
    const DType dtype = std::array{DType::f32, DType::bf16, DType::f16}[i % 3];
    const Problem p = random_problem(rng, dtype);
    check_outcome(p, run(p, false, Device{}, 100 + i), "forward");
    check_outcome(p, run(p, true, Device{}, 900 + i), "backward");
  }
}

TEST_CASE("mean pooling edge cases on the CPU", "[mean_pooling][cpu]") {
  for (const Problem& p : edge_problems()) {
    for (bool backward : {false, true}) {
      const Outcome o = run(p, backward, Device{}, 7);
      check_outcome(p, o, backward ? "backward" : "forward");
      CHECK(o.info.backend == Backend::cpu);
    }
  }
}

TEST_CASE("an empty sequence gives zeros, and its gradient writes nothing", "[mean_pooling][cpu]") {
  Tensor x = host({6, 4}), cu = cu_tensor({0, 3, 3, 6});
  Tensor out = mean_pooling({x.view(), cu.view()}).out;
  REQUIRE(out.shape() == Dims{3, 4});
  for (int64_t d = 0; d < 4; ++d) {
    CHECK(out.data_as<float>()[4 + d] == 0.0f);
    const float* xs = x.data_as<float>();
    CHECK(std::abs(out.data_as<float>()[d] - (xs[d] + xs[4 + d] + xs[8 + d]) / 3) < 1e-6f);
  }
  Tensor dx = mean_pooling_backward({out.view(), cu.view()}, {.num_tokens = 6}).dx;
  REQUIRE(dx.shape() == Dims{6, 4});
  CHECK(dx.data_as<float>()[0] == out.data_as<float>()[0] / 3);
}

TEST_CASE("the allocating forms, keys and repeated runs", "[mean_pooling][cpu]") {
  std::mt19937_64 rng(5);
  Tensor x = Tensor::empty({3, 5000, 96}, DType::bf16);
  cli::fill_normal(x, rng);
  Tensor a = mean_pooling({x.view()}).out, b = mean_pooling({x.view()}).out;
  REQUIRE(a.shape() == Dims{3, 96});
  CHECK(std::memcmp(a.data(), b.data(), a.nbytes()) == 0);  // the same sums in the same order
  Tensor out = Tensor::empty({3, 96}, DType::bf16);
  const RunInfo info = mean_pooling_into({x.view()}, out.view());
  CHECK(std::memcmp(a.data(), out.data(), a.nbytes()) == 0);
  CHECK_THAT(info.key, Catch::Matchers::StartsWith("mean_pool_fwd.cpu.") && Catch::Matchers::EndsWith(".bf16"));
  Tensor dx = mean_pooling_backward({a.view()}, {.num_tokens = 5000}).dx;
  CHECK(dx.shape() == Dims{3, 5000, 96});
  Tensor cu = cu_tensor({0, 4000, 4000, 15000});
  Tensor packed = Tensor::empty({15000, 96}, DType::bf16);
  std::memcpy(packed.data(), x.data(), packed.nbytes());
  Tensor v1 = mean_pooling({packed.view(), cu.view()}).out, v2 = mean_pooling({packed.view(), cu.view()}).out;
  CHECK(std::memcmp(v1.data(), v2.data(), v1.nbytes()) == 0);
}

TEST_CASE("bad mean pooling input names the argument", "[mean_pooling][errors]") {
  Tensor x = host({2, 5, 8}), packed = host({7, 8}), out = host({2, 8}), cu = cu_tensor({0, 3, 7});
  auto into = [&](const TensorView& in, std::optional<TensorView> c, const TensorView& o) {
    return error_of([&] { mean_pooling_into({in, c}, o); });
  };
  CHECK_THAT(into(packed.view(), std::nullopt, out.view()),
             ContainsSubstring("mean_pooling: x:") && ContainsSubstring("rank 3"));
  CHECK_THAT(into(x.view(), cu.view(), out.view()),
             ContainsSubstring("x:") && ContainsSubstring("rank 2") && ContainsSubstring("varlen"));
  Tensor cu64 = host({3}, DType::i64);
  CHECK_THAT(into(packed.view(), cu64.view(), out.view()), ContainsSubstring("cu_seqlens: expected dtype i32"));
  Tensor cu2d = host({3, 1}, DType::i32);
  CHECK_THAT(into(packed.view(), cu2d.view(), out.view()),
             ContainsSubstring("cu_seqlens:") && ContainsSubstring("rank 1"));
  Tensor short_cu = cu_tensor({0, 7});  // one sequence, but out has two rows
  CHECK_THAT(into(packed.view(), short_cu.view(), out.view()), ContainsSubstring("out: dim 0 (N)"));
  Tensor bad_last = cu_tensor({0, 3, 6});
  CHECK_THAT(into(packed.view(), bad_last.view(), out.view()),
             ContainsSubstring("cu_seqlens: last entry must equal the packed length 7, got 6"));
  Tensor bad_first = cu_tensor({1, 3, 7});
  CHECK_THAT(into(packed.view(), bad_first.view(), out.view()), ContainsSubstring("cu_seqlens: must start at 0"));
  Tensor decreasing = cu_tensor({0, 5, 3});
  CHECK_THAT(into(packed.view(), decreasing.view(), out.view()),
             ContainsSubstring("cu_seqlens: must be non-decreasing"));
  Tensor wide = host({2, 9});
  CHECK_THAT(into(x.view(), std::nullopt, wide.view()), ContainsSubstring("out: dim 1 (D) must be 8"));
  Tensor half_out = host({2, 8}, DType::bf16);
  CHECK_THAT(into(x.view(), std::nullopt, half_out.view()), ContainsSubstring("out: expected dtype f32"));
  TensorView aliased = out.view();
  aliased.strides = {0, 1};
  CHECK_THAT(into(x.view(), std::nullopt, aliased), ContainsSubstring("an output's elements must not share memory"));
  TensorView columns = x.view();
  columns.strides = {40, 1, 5};
  CHECK_THAT(into(columns, std::nullopt, out.view()), ContainsSubstring("x: the last dim must be contiguous"));

  Tensor g = host({2, 8}), dx = host({2, 5, 8});
  CHECK_THAT(error_of([&] { mean_pooling_backward_into({x.view()}, {}, dx.view()); }),
             ContainsSubstring("mean_pooling_backward: g:") && ContainsSubstring("rank 2"));
  CHECK_THAT(error_of([&] { mean_pooling_backward({g.view()}, {.num_tokens = -1}); }), ContainsSubstring("num_tokens: must be >= 0"));
  Args no_count;
  no_count.set("g", g.view());
  CHECK_THAT(error_of([&] { output_specs("mean_pooling_backward", no_count); }),
             ContainsSubstring("num_tokens: required"));
  Args mismatch = no_count;
  mismatch.set("num_tokens", int64_t{4}).set("dx", dx.view());
  CHECK_THAT(error_of([&] { run("mean_pooling_backward", mismatch); }), ContainsSubstring("dx: dim 1 (T) must be 4"));
  // The packed length must fit cu_seqlens' i32 entries (shapes only: nothing is allocated).
  Args huge;
  huge.set("x", TensorView{nullptr, DType::f32, {}, {int64_t{1} << 31, 8}, {8, 1}});
  huge.set("cu_seqlens", TensorView{nullptr, DType::i32, {}, {2}, {1}});
  CHECK_THAT(error_of([&] { variant_key("mean_pooling", huge); }),
             ContainsSubstring("do not fit cu_seqlens' i32 entries"));
}

TEST_CASE("the C functions of mean pooling", "[mean_pooling][c_api]") {
  Tensor x = host({7, 8}), cu = cu_tensor({0, 3, 7}), out = Tensor::empty({2, 8}, DType::f32);
  Tensor dx = Tensor::empty({7, 8}, DType::f32);
  auto desc = [](const Tensor& t, ejk_dtype dtype) {
    return ejk_tensor{t.data(), int32_t(dtype), EJK_DEVICE_CPU, 0, int32_t(t.shape().size()),
                      t.shape().data(), nullptr};
  };
  const ejk_tensor xd = desc(x, EJK_F32), cd = desc(cu, EJK_I32), od = desc(out, EJK_F32), dd = desc(dx, EJK_F32);
  REQUIRE(ejk_mean_pooling(nullptr, &xd, &cd, &od) == EJK_OK);
  const Tensor want = mean_pooling({x.view(), cu.view()}).out;
  CHECK(std::memcmp(want.data(), out.data(), out.nbytes()) == 0);
  REQUIRE(ejk_mean_pooling_backward(nullptr, &od, &cd, nullptr, &dd) == EJK_OK);
  const Tensor want_dx = mean_pooling_backward({out.view(), cu.view()}, {.num_tokens = 7}).dx;
  CHECK(std::memcmp(want_dx.data(), dx.data(), dx.nbytes()) == 0);
  CHECK(ejk_mean_pooling(nullptr, &xd, &cd, nullptr) == EJK_INVALID_ARGUMENT);
  CHECK_THAT(std::string(ejk_last_error()), ContainsSubstring("out"));
  const ejk_tensor bad_cu = desc(cu, EJK_I64);
  CHECK(ejk_mean_pooling(nullptr, &xd, &bad_cu, &od) == EJK_INVALID_ARGUMENT);
  CHECK_THAT(std::string(ejk_last_error()), ContainsSubstring("cu_seqlens"));
  // The backward's generated options: num_tokens only where has_num_tokens says so, and a
  // field this library does not know is refused.
  ejk_mean_pooling_backward_options o;
  ejk_mean_pooling_backward_options_init(&o);
  o.num_tokens = 5;  // not given: dx's 7 tokens stand
  CHECK(ejk_mean_pooling_backward(nullptr, &od, &cd, &o, &dd) == EJK_OK);
  o.has_num_tokens = 1;
  CHECK(ejk_mean_pooling_backward(nullptr, &od, &cd, &o, &dd) == EJK_INVALID_ARGUMENT);
  CHECK_THAT(std::string(ejk_last_error()), ContainsSubstring("dx: dim 0 (T) must be 5"));
  struct Newer {
    ejk_mean_pooling_backward_options known;
    int64_t future_field;
  } newer{};
  ejk_mean_pooling_backward_options_init(&newer.known);
  newer.known.struct_size = sizeof(Newer);
  newer.future_field = 3;
  CHECK(ejk_mean_pooling_backward(nullptr, &od, &cd, &newer.known, &dd) == EJK_INVALID_ARGUMENT);
  CHECK_THAT(std::string(ejk_last_error()), ContainsSubstring("ejk_mean_pooling_backward_options"));
}

TEST_CASE("mean pooling on CUDA matches the float64 reference and the CPU", "[mean_pooling][cuda][gpu]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  std::mt19937_64 rng(77);
  std::vector<Problem> problems = edge_problems();
  for (int i = 0; i < 240; ++i)
    problems.push_back(random_problem(rng, std::array{DType::f32, DType::bf16, DType::f16}[i % 3]));
  // Long sequences cut into many chunks (the combine pass), dense and packed, aligned and not.
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    Problem p;
    p.dtype = t, p.seqs = 2, p.tokens = 100000, p.d = 128;
    problems.push_back(p);
    p.in.offset = 1;
    problems.push_back(p);
    p = Problem{};
    p.dtype = t, p.varlen = true, p.seqs = 4, p.tokens = 200003, p.d = 256, p.cu = {0, 80000, 80000, 200000, 200003};
    problems.push_back(p);
    p.d = 260, p.in.pad = 4;
    problems.push_back(p);
  }
  for (size_t i = 0; i < problems.size(); ++i) {
    const Problem& p = problems[i];
    for (bool backward : {false, true}) {
      const Outcome o = run(p, backward, gpu(), 3000 + i);
      check_outcome(p, o, backward ? "CUDA backward" : "CUDA forward");
      CHECK(o.info.backend == Backend::cuda);
      const Outcome c = run(p, backward, Device{}, 3000 + i);  // same seed: same inputs
      INFO(p.name());
      CHECK(compare(o.got, c.got).rel_l2 <= tolerance(p.dtype));
    }
  }
}

TEST_CASE("mean pooling on CUDA: repeated runs agree bit for bit, and device cu_seqlens stay there",
          "[mean_pooling][cuda][gpu]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  Tensor x = host({400000, 64}, DType::bf16).to(gpu()), cu = cu_tensor({0, 10, 399990, 399990, 400000}).to(gpu());
  Tensor a = mean_pooling({x.view(), cu.view()}).out, b = mean_pooling({x.view(), cu.view()}).out;
  synchronize(gpu());
  Tensor ha = a.to(Device{}), hb = b.to(Device{});
  CHECK(std::memcmp(ha.data(), hb.data(), ha.nbytes()) == 0);
  CHECK(ha.data_as<uint16_t>()[2 * 64] == 0);  // the empty third sequence: +0.0
  // A bad device-resident cu_seqlens is not read by the host: no error, and nothing outside the
  // tensors is touched (the kernels clamp the spans); compute-sanitizer checks the latter.
  Tensor bad = cu_tensor({5, 3, 900000, -4, 7}).to(gpu());
  CHECK_NOTHROW(mean_pooling({x.view(), bad.view()}));
  synchronize(gpu());
}
