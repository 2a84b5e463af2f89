// merge_attention_states through the public API: random problems (every dtype, 0, 1 and 2
// leading dims, LSEs of -inf on one side, both or neither, magnitudes up to 80, head dims that
// are and are not multiples of a 16-byte chunk, strided, permuted and misaligned tensors, in
// place) on the CPU and, where a GPU can run, on CUDA, against the float64 reference. Outputs
// are written into poisoned (0xff: NaN) buffers wider than the output, so an element left
// unwritten fails the comparison and a write outside the output fails the fence check. A side
// whose LSE is -inf has NaN in its out rows: the merge must not read them. Also: a case worked
// by hand, bad inputs naming the argument, the C function, and flash attention split over its
// keys and merged back.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

#include "ejk/admin.h"
#include "ejk/core/error.h"
#include "ejk/ejk.h"
#include "ejk/half.h"
#include "ejk/op.h"
#include "ejk/ops/flash_attention.h"
#include "ejk/ops/merge_attention_states.h"
#include "host_case.h"

using namespace ejk;
using Catch::Matchers::ContainsSubstring;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr DType kDtypes[] = {DType::f32, DType::bf16, DType::f16};

// How a tensor sits in its buffer: `offset` elements in (odd: no 16-byte alignment), `pad`
// elements between rows and one row between the planes of every outer dim, and the outer
// dims (all but the contiguous last) in memory order `order` (outermost first), for tensors of
// its length plus one; others keep their order.
struct Placement {
  int64_t offset = 0, pad = 0;
  std::vector<int> order;
};

// A strided view into a host buffer of its own (1-D storage with fences around the view).
struct Buffer {
  Tensor storage;
  TensorView view;

  TensorView on(Device device, Tensor& keep) const {
    keep = device.kind == DeviceKind::cpu ? storage : storage.to(device);
    TensorView v = view;
    v.device = device;
    v.data = static_cast<char*>(keep.data()) + (static_cast<char*>(view.data) - static_cast<char*>(storage.data()));
    return v;
  }
};

Buffer make_buffer(const Dims& shape, DType dtype, const Placement& pl) {
  const int64_t rank = shape.size();
  std::vector<int> order = pl.order;  // for the outs' rank; other ranks keep their order
  if (int64_t(order.size()) != rank - 1) order.resize(size_t(rank - 1)), std::iota(order.begin(), order.end(), 0);
  Dims strides = contiguous_strides(shape);
  int64_t step = shape[rank - 1] + pl.pad;
  for (auto d = order.rbegin(); d != order.rend(); ++d) {
    strides[*d] = step;
    step *= shape[*d] + (pl.pad > 0 ? 1 : 0);
  }
  int64_t span = 1;
  for (int64_t i = 0; i < rank; ++i) span += shape[i] > 0 ? (shape[i] - 1) * strides[i] : 0;
  Buffer b;
  b.storage = Tensor::empty({pl.offset + span + 16}, dtype);
  std::memset(b.storage.data(), 0xff, b.storage.nbytes());
  b.view = TensorView{static_cast<char*>(b.storage.data()) + pl.offset * int64_t(dtype_size(dtype)), dtype, Device{},
                      shape, strides};
  return b;
}

// Element offset in v of (lead index l over the leading dims, then the trailing indices).
int64_t offset_of(const TensorView& v, int64_t lead_rank, int64_t l, std::initializer_list<int64_t> rest) {
  int64_t off = 0;
  for (int64_t d = lead_rank - 1; d >= 0; --d) off += (l % v.shape[d]) * v.strides[d], l /= v.shape[d];
  int64_t d = lead_rank;
  for (int64_t i : rest) off += i * v.strides[d++];
  return off;
}

double get(const TensorView& v, int64_t off) {
  switch (v.dtype) {
    case DType::f32: return static_cast<const float*>(v.data)[off];
    case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(v.data)[off]);
    default: return f16_to_float(static_cast<const uint16_t*>(v.data)[off]);
  }
}

void put(const TensorView& v, int64_t off, float x) {
  switch (v.dtype) {
    case DType::f32: static_cast<float*>(v.data)[off] = x; break;
    case DType::bf16: static_cast<uint16_t*>(v.data)[off] = float_to_bf16(x); break;
    default: static_cast<uint16_t*>(v.data)[off] = float_to_f16(x); break;
  }
}

enum class Lse { mixed, large };

struct CaseSpec {
  Dims lead;
  int64_t t = 1, h = 1, d = 1;
  DType dtype = DType::f32;
  Lse lse = Lse::mixed;
  Placement in, out;
  uint64_t seed = 1;
  std::string name() const {
    return fmt::format("{} lead {} T{} H{} D{} lse {} in(+{},pad {}) out(+{},pad {})", dtype_name(dtype),
                       to_string(lead), t, h, d, lse == Lse::mixed ? "mixed" : "large", in.offset, in.pad, out.offset,
                       out.pad);
  }
};

// A problem on the host: inputs, and how many rows take one side alone or neither.
struct Case {
  CaseSpec spec;
  Buffer out_a, lse_a, out_b, lse_b;
  int64_t one_sided = 0, neither = 0;
  Dims out_shape() const { return out_a.view.shape; }
  Dims lse_shape() const { return lse_a.view.shape; }
};

Dims with_lead(const Dims& lead, std::initializer_list<int64_t> rest) {
  Dims d = lead;
  for (int64_t x : rest) d.push_back(x);
  return d;
}

int64_t count(const Dims& lead) {
  int64_t n = 1;
  for (int64_t x : lead) n *= x;
  return n;
}

// Random outs; LSEs -inf on one side in ~20% of rows and on both in ~10% (mixed: else in
// [-10, 10]; large: else +-80 apart by up to 100, so one weight underflows). The out rows of a
// -inf side are NaN.
Case make_case(const CaseSpec& s) {
  std::mt19937_64 rng(s.seed);
  Case c{s};
  const int64_t r = s.lead.size(), leads = count(s.lead);
  for (Buffer* o : {&c.out_a, &c.out_b}) *o = make_buffer(with_lead(s.lead, {s.t, s.h, s.d}), s.dtype, s.in);
  for (Buffer* l : {&c.lse_a, &c.lse_b}) *l = make_buffer(with_lead(s.lead, {s.h, s.t}), DType::f32, s.in);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(-10.0f, 10.0f), big(-100.0f, 0.0f);
  std::uniform_int_distribution<int> kind(0, 9);
  for (int64_t l = 0; l < leads; ++l)
    for (int64_t h = 0; h < s.h; ++h)
      for (int64_t t = 0; t < s.t; ++t) {
        float a = uni(rng), b = uni(rng);
        if (s.lse == Lse::large) {
          const float top = std::bernoulli_distribution(0.5)(rng) ? 80.0f : -80.0f;
          const bool a_top = kind(rng) < 5;
          (a_top ? a : b) = top;
          (a_top ? b : a) = top + big(rng);
        }
        const int k = kind(rng);
        if (k == 0) a = b = -kInf, ++c.neither;
        else if (k == 1) a = -kInf, ++c.one_sided;
        else if (k == 2) b = -kInf, ++c.one_sided;
        static_cast<float*>(c.lse_a.view.data)[offset_of(c.lse_a.view, r, l, {h, t})] = a;
        static_cast<float*>(c.lse_b.view.data)[offset_of(c.lse_b.view, r, l, {h, t})] = b;
        for (int64_t d = 0; d < s.d; ++d) {
          put(c.out_a.view, offset_of(c.out_a.view, r, l, {t, h, d}), a == -kInf ? NAN : normal(rng));
          put(c.out_b.view, offset_of(c.out_b.view, r, l, {t, h, d}), b == -kInf ? NAN : normal(rng));
        }
      }
  return c;
}

Args inputs_of(const Case& c) {
  Args a;
  a.set("out_a", c.out_a.view).set("lse_a", c.lse_a.view).set("out_b", c.out_b.view).set("lse_b", c.lse_b.view);
  return a;
}

// Host outputs (poisoned, in out placement) checked against the reference: relative L2 of out,
// LSE within 1e-6 relative (plus 1e-6), infinities where the reference has them, NaN nowhere,
// one-sided rows equal to their side bit for bit (rounded to the dtype), fences untouched.
struct Check {
  double rel_l2 = 0, lse_err = 0;
  int64_t nan = 0, inf_mismatch = 0, inexact_one_sided = 0, fence_writes = 0;
};

int64_t fence_writes(const Buffer& b) {
  // Bytes outside the view's elements that are no longer 0xff.
  const auto* base = static_cast<const unsigned char*>(b.storage.data());
  std::vector<char> inside(size_t(b.storage.nbytes()), 0);
  const int64_t esize = int64_t(dtype_size(b.view.dtype)), first = static_cast<const unsigned char*>(b.view.data) - base;
  const int64_t n = b.view.numel();
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0, rem = i;
    for (int64_t d = b.view.rank() - 1; d >= 0; --d) off += (rem % b.view.shape[d]) * b.view.strides[d], rem /= b.view.shape[d];
    std::memset(&inside[size_t(first + off * esize)], 1, size_t(esize));
  }
  int64_t bad = 0;
  for (size_t i = 0; i < inside.size(); ++i) bad += !inside[i] && base[i] != 0xff;
  return bad;
}

Check check(const Case& c, const Buffer& out, const Buffer& lse) {
  const std::vector<ReferenceOutput> ref = reference("merge_attention_states", inputs_of(c));
  REQUIRE(ref.size() == 2);
  const std::vector<double>& ro = ref[0].name == "out" ? ref[0].values : ref[1].values;
  const std::vector<double>& rl = ref[0].name == "out" ? ref[1].values : ref[0].values;
  const CaseSpec& s = c.spec;
  const int64_t r = s.lead.size(), leads = count(s.lead);
  Check k;
  double num = 0, den = 0;
  for (int64_t l = 0; l < leads; ++l)
    for (int64_t h = 0; h < s.h; ++h)
      for (int64_t t = 0; t < s.t; ++t) {
        const double x = static_cast<const float*>(lse.view.data)[offset_of(lse.view, r, l, {h, t})];
        const double y = rl[size_t((l * s.h + h) * s.t + t)];
        if (std::isnan(x)) ++k.nan;
        else if (std::isinf(x) || std::isinf(y)) k.inf_mismatch += x != y;
        else k.lse_err = std::max(k.lse_err, std::abs(x - y) / (1e-6 + 1e-6 * std::abs(y)));
        const float la = static_cast<const float*>(c.lse_a.view.data)[offset_of(c.lse_a.view, r, l, {h, t})];
        const float lb = static_cast<const float*>(c.lse_b.view.data)[offset_of(c.lse_b.view, r, l, {h, t})];
        const Buffer* only = la == -kInf && lb != -kInf ? &c.out_b : lb == -kInf && la != -kInf ? &c.out_a : nullptr;
        for (int64_t d = 0; d < s.d; ++d) {
          const double o = get(out.view, offset_of(out.view, r, l, {t, h, d}));
          const double want = ro[size_t(((l * s.t + t) * s.h + h) * s.d + d)];
          if (std::isnan(o)) ++k.nan;
          num += (o - want) * (o - want), den += want * want;
          if (only && o != get(only->view, offset_of(only->view, r, l, {t, h, d}))) ++k.inexact_one_sided;
        }
      }
  k.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  k.fence_writes = fence_writes(out) + fence_writes(lse);
  return k;
}

void require_pass(const Check& k, DType dtype) {
  INFO(fmt::format("rel_l2 {:.3e} lse_err {:.3f} (of tolerance) nan {} inf_mismatch {} inexact_one_sided {} fence {}",
                   k.rel_l2, k.lse_err, k.nan, k.inf_mismatch, k.inexact_one_sided, k.fence_writes));
  CHECK(k.nan == 0);
  CHECK(k.inf_mismatch == 0);
  CHECK(k.inexact_one_sided == 0);
  CHECK(k.fence_writes == 0);
  CHECK(k.lse_err <= 1.0);
  CHECK(k.rel_l2 <= (dtype == DType::f32 ? 1e-5 : 1e-2));
}

// Runs c on `device` into poisoned outputs (in place: into out_a and lse_a's own buffers) and
// returns them on the host.
std::pair<Buffer, Buffer> run_case(const Case& c, Device device, bool in_place, RunInfo& info) {
  Buffer out = in_place ? c.out_a : make_buffer(c.out_shape(), c.spec.dtype, c.spec.out);
  Buffer lse = in_place ? c.lse_a : make_buffer(c.lse_shape(), DType::f32, c.spec.out);
  if (in_place) {  // copies: the case's own inputs stay for the reference
    for (Buffer* b : {&out, &lse}) {
      Tensor copy = Tensor::empty(b->storage.shape(), b->storage.dtype());
      std::memcpy(copy.data(), b->storage.data(), b->storage.nbytes());
      b->view.data = static_cast<char*>(copy.data()) + (static_cast<char*>(b->view.data) - static_cast<char*>(b->storage.data()));
      b->storage = copy;
    }
  }
  Tensor ka, kla, kb, klb, ko, kl;
  const TensorView vo = out.on(device, ko), vl = lse.on(device, kl);
  const TensorView va = in_place ? vo : c.out_a.on(device, ka), vla = in_place ? vl : c.lse_a.on(device, kla);
  info = merge_attention_states_into({va, vla, c.out_b.on(device, kb), c.lse_b.on(device, klb)}, vo, vl);
  synchronize(device);
  if (device.kind != DeviceKind::cpu) {
    out.storage = ko.to(Device{}), lse.storage = kl.to(Device{});
    out.view.data = static_cast<char*>(out.storage.data()) + (static_cast<const char*>(vo.data) - static_cast<const char*>(ko.data()));
    lse.view.data = static_cast<char*>(lse.storage.data()) + (static_cast<const char*>(vl.data) - static_cast<const char*>(kl.data()));
  }
  return {out, lse};
}

// A spread of problems: every dtype, 0-2 leading dims, head dims around the 16-byte chunk
// (1, 7, 8, 64, 100, 128, 256, 520), placements padded, misaligned and permuted.
std::vector<CaseSpec> random_specs(uint64_t seed, int n) {
  std::mt19937_64 rng(seed);
  auto pick = [&](std::initializer_list<int64_t> v) {
    return *(v.begin() + std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng));
  };
  std::vector<CaseSpec> specs;
  for (int i = 0; i < n; ++i) {
    CaseSpec s;
    s.seed = seed + uint64_t(i);
    s.dtype = kDtypes[i % 3];
    const int64_t lead_rank = (i / 3) % 3;
    for (int64_t j = 0; j < lead_rank; ++j) s.lead.push_back(pick({1, 2, 3}));
    s.t = pick({1, 1, 2, 7, 33, 129});
    s.h = pick({1, 3, 8});
    s.d = pick({1, 7, 8, 64, 64, 100, 128, 128, 256, 520});
    s.lse = i % 4 == 3 ? Lse::large : Lse::mixed;
    const int layout = int(pick({0, 0, 1, 2, 3, 4}));
    if (layout == 1) s.in.pad = 8, s.out.pad = 3, s.out.offset = 1;  // padded; out misaligned
    if (layout == 2) s.in.offset = 1, s.in.pad = 5, s.out.pad = 8;   // inputs misaligned
    if (layout == 3 && lead_rank > 0) s.in.order = lead_rank == 1 ? std::vector<int>{1, 0, 2} : std::vector<int>{2, 1, 0, 3};
    if (layout == 4) s.out.pad = 8;  // leading dims that fold in the inputs but not in the outputs
    specs.push_back(s);
  }
  return specs;
}

}  // namespace

TEST_CASE("a merge worked by hand", "[merge][cpu]") {
  // lse_a = log 1, lse_b = log 3: weights 1/4 and 3/4, lse log 4. Leading dims [2, 1].
  const float a_vals[] = {1.0f, -2.0f}, b_vals[] = {5.0f, 2.0f};
  for (DType dtype : kDtypes) {
    Tensor oa = Tensor::empty({2, 1, 1, 1, 2}, dtype), ob = Tensor::empty({2, 1, 1, 1, 2}, dtype);
    Tensor la = Tensor::empty({2, 1, 1, 1}, DType::f32), lb = Tensor::empty({2, 1, 1, 1}, DType::f32);
    for (int i = 0; i < 4; ++i) put(oa.view(), i, a_vals[i % 2]), put(ob.view(), i, b_vals[i % 2]);
    la.data_as<float>()[0] = 0.0f, lb.data_as<float>()[0] = std::log(3.0f);
    la.data_as<float>()[1] = -kInf, lb.data_as<float>()[1] = -kInf;  // second lead: no key at all
    MergeAttentionStatesResult r = merge_attention_states({oa.view(), la.view(), ob.view(), lb.view()});
    CHECK(r.out.shape() == Dims{2, 1, 1, 1, 2});
    CHECK(r.lse.shape() == Dims{2, 1, 1, 1});
    CHECK(r.out.dtype() == dtype);
    CHECK_THAT(r.info.key, ContainsSubstring(fmt::format("merge_states.cpu.")) && ContainsSubstring(std::string(dtype_name(dtype))));
    CHECK(std::abs(get(r.out.view(), 0) - 4.0) <= 1e-6);   // (1 + 3 * 5) / 4
    CHECK(std::abs(get(r.out.view(), 1) - 1.0) <= 1e-6);   // (-2 + 3 * 2) / 4
    CHECK(std::abs(r.lse.data_as<float>()[0] - std::log(4.0)) <= 1e-6);
    CHECK(get(r.out.view(), 2) == 0.0);
    CHECK(get(r.out.view(), 3) == 0.0);
    CHECK(r.lse.data_as<float>()[1] == -kInf);
    // The reference agrees with the hand computation.
    Args args;
    args.set("out_a", oa.view()).set("lse_a", la.view()).set("out_b", ob.view()).set("lse_b", lb.view());
    const std::vector<ReferenceOutput> ref = reference("merge_attention_states", args);
    const auto& ro = ref[0].name == "out" ? ref[0] : ref[1];
    const auto& rl = ref[0].name == "out" ? ref[1] : ref[0];
    CHECK(std::abs(ro.values[0] - 4.0) <= 1e-6);  // log 3 is rounded to f32
    CHECK(std::abs(rl.values[0] - std::log(4.0)) <= 1e-6);
    CHECK(rl.values[1] == -std::numeric_limits<double>::infinity());
  }
}

TEST_CASE("CPU merges match the float64 reference", "[merge][cpu]") {
  for (const CaseSpec& s : random_specs(100, 90)) {
    DYNAMIC_SECTION(s.name()) {
      const Case c = make_case(s);
      RunInfo info;
      auto [out, lse] = run_case(c, Device{}, false, info);
      CHECK(info.backend == Backend::cpu);
      require_pass(check(c, out, lse), s.dtype);
    }
  }
}

TEST_CASE("the random cases hold rows of one side and of neither", "[merge]") {
  int64_t one_sided = 0, neither = 0;  // the -inf rows the checks are about do occur
  for (uint64_t seed : {100, 500})
    for (const CaseSpec& s : random_specs(seed, 90)) {
      const Case c = make_case(s);
      one_sided += c.one_sided, neither += c.neither;
    }
  CHECK(one_sided > 1000);
  CHECK(neither > 500);
}

TEST_CASE("CPU merges in place and over many tasks", "[merge][cpu]") {
  for (DType dtype : kDtypes) {
    CaseSpec s;
    s.dtype = dtype, s.lead = {3}, s.t = 300, s.h = 8, s.d = 128, s.seed = 7;  // ~170 tasks, cut across planes
    DYNAMIC_SECTION(s.name() << " in place") {
      const Case c = make_case(s);
      RunInfo info;
      auto [out, lse] = run_case(c, Device{}, true, info);
      require_pass(check(c, out, lse), dtype);
    }
  }
}

TEST_CASE("empty problems write nothing; head_dim 0 still merges the LSEs", "[merge][cpu]") {
  for (const Dims& lead : {Dims{0}, Dims{2, 0}}) {
    CaseSpec s;
    s.lead = lead, s.t = 5, s.h = 2, s.d = 8;
    const Case c = make_case(s);
    RunInfo info;
    auto [out, lse] = run_case(c, Device{}, false, info);
    CHECK(fence_writes(out) == 0);
    CHECK(fence_writes(lse) == 0);
  }
  CaseSpec s;
  s.lead = {2}, s.t = 9, s.h = 3, s.d = 0;
  const Case c = make_case(s);
  RunInfo info;
  auto [out, lse] = run_case(c, Device{}, false, info);
  require_pass(check(c, out, lse), s.dtype);
}

TEST_CASE("bad inputs name the argument and the expectation", "[merge][errors]") {
  auto t = [](const Dims& shape, DType dtype) { return Tensor::empty(shape, dtype); };
  Tensor oa = t({2, 4, 3, 8}, DType::bf16), la = t({2, 3, 4}, DType::f32);
  Tensor ob = t({2, 4, 3, 8}, DType::bf16), lb = t({2, 3, 4}, DType::f32);
  auto fails = [&](const TensorView& a, const TensorView& al, const TensorView& b, const TensorView& bl,
                   std::initializer_list<const char*> words) {
    try {
      merge_attention_states({a, al, b, bl});
      FAIL("no error");
    } catch (const InvalidArgument& e) {
      for (const char* w : words) CHECK_THAT(e.what(), ContainsSubstring(w));
    }
  };
  fails(oa.view(), la.view(), t({3, 4, 3, 8}, DType::bf16).view(), t({3, 3, 4}, DType::f32).view(),
        {"merge_attention_states", "out_b", "leading dims [3]", "[2]"});
  fails(oa.view(), la.view(), ob.view(), t({3, 4}, DType::f32).view(), {"lse_b", "leading dims []"});
  fails(oa.view(), t({2, 3, 4}, DType::bf16).view(), ob.view(), lb.view(), {"lse_a", "expected dtype f32", "bf16"});
  fails(oa.view(), la.view(), t({2, 4, 3, 8}, DType::f16).view(), lb.view(), {"out_b", "expected dtype bf16", "f16"});
  fails(oa.view(), la.view(), ob.view(), t({2, 3, 5}, DType::f32).view(), {"lse_b", "(T)", "must be 4"});
  fails(oa.view(), la.view(), ob.view(), t({2, 4, 4}, DType::f32).view(), {"lse_b", "(H)", "must be 3"});
  fails(t({4, 8}, DType::bf16).view(), la.view(), ob.view(), lb.view(), {"out_a", "rank >= 3"});
  fails(t({2, 4, 3, 8}, DType::i32).view(), la.view(), ob.view(), lb.view(), {"out_a", "expected dtype"});
  TensorView strided = ob.view();
  strided.strides = {96, 24, 8, 2};
  fails(oa.view(), la.view(), strided, lb.view(), {"out_b", "last dim must be contiguous"});
  // Outputs of the wrong shape or dtype.
  CHECK_THROWS_WITH(merge_attention_states_into({oa.view(), la.view(), ob.view(), lb.view()},
                                                t({2, 4, 3, 9}, DType::bf16).view(), t({2, 3, 4}, DType::f32).view()),
                    ContainsSubstring("out") && ContainsSubstring("expected shape"));
  CHECK_THROWS_WITH(merge_attention_states_into({oa.view(), la.view(), ob.view(), lb.view()},
                                                t({2, 4, 3, 8}, DType::bf16).view(), t({2, 3, 4}, DType::bf16).view()),
                    ContainsSubstring("lse") && ContainsSubstring("expected dtype f32"));
}

TEST_CASE("the C function merges and reports errors", "[merge][c]") {
  CaseSpec s;
  s.lead = {2}, s.t = 5, s.h = 3, s.d = 24, s.dtype = DType::bf16;
  const Case c = make_case(s);
  Buffer out = make_buffer(c.out_shape(), s.dtype, {}), lse = make_buffer(c.lse_shape(), DType::f32, {});
  auto desc = [](const TensorView& v) {
    return ejk_tensor{v.data, int32_t(v.dtype), EJK_DEVICE_CPU, 0, int32_t(v.rank()), v.shape.data(), v.strides.data()};
  };
  const ejk_tensor oa = desc(c.out_a.view), la = desc(c.lse_a.view), ob = desc(c.out_b.view), lb = desc(c.lse_b.view);
  const ejk_tensor o = desc(out.view), l = desc(lse.view);
  REQUIRE(ejk_merge_attention_states(nullptr, &oa, &la, &ob, &lb, &o, &l) == EJK_OK);
  require_pass(check(c, out, lse), s.dtype);
  CHECK(ejk_merge_attention_states(nullptr, &oa, &la, &ob, nullptr, &o, &l) == EJK_INVALID_ARGUMENT);
  CHECK_THAT(ejk_last_error(), ContainsSubstring("lse_b"));
  CHECK(ejk_merge_attention_states(nullptr, &oa, &la, &ob, &o, &o, &l) == EJK_INVALID_ARGUMENT);
  CHECK_THAT(ejk_last_error(), ContainsSubstring("lse_b"));
}

// Attention over all keys equals the merge of attention over a split of them: split the keys
// of a flash_attention problem in three uneven parts, run each, merge the parts into the first
// in place, and compare with the run over every key.
TEST_CASE("flash attention over split keys then merged equals flash attention over all keys", "[merge][cpu][flash]") {
  const int64_t B = 2, Sq = 37, Sk = 150, Hq = 4, Hkv = 2, D = 64;
  std::mt19937_64 rng(31);
  Tensor q = Tensor::empty({B, Sq, Hq, D}, DType::f32), k = Tensor::empty({B, Sk, Hkv, D}, DType::f32),
         v = Tensor::empty({B, Sk, Hkv, D}, DType::f32);
  for (Tensor* x : {&q, &k, &v}) cli::fill_normal(*x, rng);
  auto keys = [&](const Tensor& t, int64_t begin, int64_t len) {
    TensorView s = t.view();
    s.data = t.data_as<float>() + begin * t.view().strides[1];
    s.shape[1] = len;
    return s;
  };
  // Without the CPU JIT, the flash variant must be built in (a build narrowed by EJK_VARIANTS
  // may lack this host's).
  Args flash_args;
  flash_args.set("q", q.view()).set("k", k.view()).set("v", v.view());
  const std::string key = variant_key("flash_attention", flash_args);
  bool builtin = false;
  for (const OpListing& l : list_ops()) builtin = builtin || std::count(l.builtin.begin(), l.builtin.end(), key) > 0;
  if (!builtin && !cpu_jit_available()) SKIP("flash variant " << key << " is not built in and this build has no CPU JIT");
  const FlashAttentionResult all = flash_attention(FlashAttentionInputs{q.view(), k.view(), v.view()});
  const int64_t cuts[] = {0, 41, 100, Sk};
  FlashAttentionResult acc;
  for (int p = 0; p < 3; ++p) {
    const int64_t b0 = cuts[p], n = cuts[p + 1] - cuts[p];
    FlashAttentionResult part = flash_attention(FlashAttentionInputs{q.view(), keys(k, b0, n), keys(v, b0, n)});
    if (p == 0) acc = std::move(part);
    else merge_attention_states_into({acc.out.view(), acc.lse.view(), part.out.view(), part.lse.view()}, acc.out.view(),
                                     acc.lse.view());
  }
  double num = 0, den = 0, lse_err = 0;
  for (int64_t i = 0; i < all.out.numel(); ++i) {
    const double x = acc.out.data_as<float>()[i], y = all.out.data_as<float>()[i];
    REQUIRE(!std::isnan(x));
    num += (x - y) * (x - y), den += y * y;
  }
  for (int64_t i = 0; i < all.lse.numel(); ++i)
    lse_err = std::max(lse_err, double(std::abs(acc.lse.data_as<float>()[i] - all.lse.data_as<float>()[i])));
  INFO(fmt::format("rel_l2 {:.3e} lse max abs {:.3e}", std::sqrt(num / den), lse_err));
  CHECK(std::sqrt(num / den) <= 1e-5);
  CHECK(lse_err <= 1e-5);
}

TEST_CASE("CUDA merges match the float64 reference", "[merge][cuda][gpu]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  const Device gpu{DeviceKind::cuda, 0};
  std::vector<CaseSpec> specs = random_specs(500, 120);
  for (DType dtype : kDtypes) {  // many rows: more than one wave of blocks; in place
    CaseSpec s;
    s.dtype = dtype, s.lead = {4, 2}, s.t = 1000, s.h = 16, s.d = 128, s.seed = 9;
    specs.push_back(s);
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const CaseSpec& s = specs[i];
    const bool in_place = i >= specs.size() - 3 || i % 7 == 0;
    DYNAMIC_SECTION(s.name() << (in_place ? " in place" : "")) {
      const Case c = make_case(s);
      RunInfo info;
      auto [out, lse] = run_case(c, gpu, in_place, info);
      CHECK(info.backend == Backend::cuda);
      CHECK_THAT(info.key, ContainsSubstring("merge_states.cuda."));
      require_pass(check(c, out, lse), s.dtype);
    }
  }
}

TEST_CASE("CUDA: empty problems launch nothing; head_dim 0 merges the LSEs", "[merge][cuda][gpu]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  const Device gpu{DeviceKind::cuda, 0};
  for (const Dims& lead : {Dims{0}, Dims{2, 0}, Dims{3}}) {
    CaseSpec s;
    s.lead = lead, s.t = 5, s.h = 2, s.d = lead.size() == 1 && lead[0] == 3 ? 0 : 8;
    const Case c = make_case(s);
    RunInfo info;
    auto [out, lse] = run_case(c, gpu, false, info);
    require_pass(check(c, out, lse), s.dtype);
  }
}
