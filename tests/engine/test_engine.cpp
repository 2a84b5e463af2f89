// The op engine through the generic API (ejk/op.h): ops by name, signatures from their specs,
// output sizing, keys without a run, plan/run, the context's executor and backend. Flash
// attention is the op under test; every op takes the same path.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "ejk/admin.h"
#include "ejk/core/error.h"
#include "ejk/ejk.h"
#include "ejk/op.h"
#include "ejk/ops/flash_attention.h"

using namespace ejk;
using Catch::Matchers::ContainsSubstring;

namespace {

Tensor random_f32(Dims shape, uint32_t seed) {
  Tensor t = Tensor::empty(shape, DType::f32);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = nd(rng);
  return t;
}

struct Problem {
  Tensor q = random_f32({2, 33, 4, 64}, 1), k = random_f32({2, 47, 2, 64}, 2), v = random_f32({2, 47, 2, 64}, 3);
  Args inputs() const {
    Args a;
    a.set("q", q.view()).set("k", k.view()).set("v", v.view()).set("causal", true);
    return a;
  }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("ops are listed and described from their specs", "[engine]") {
  const auto names = op_names();
  REQUIRE(std::find(names.begin(), names.end(), "flash_attention") != names.end());
  const OpInfo info = describe_op("flash_attention");
  CHECK(info.kernel == "flash_fwd");
  auto q = std::find_if(info.tensors.begin(), info.tensors.end(), [](const OpTensorInfo& t) { return t.name == "q"; });
  REQUIRE(q != info.tensors.end());
  CHECK(q->layout == "[B, Sq, Hq, D]");
  CHECK_FALSE(q->mode_layouts.empty());
  auto block_q = std::find_if(info.axes.begin(), info.axes.end(), [](const OpAxisInfo& a) { return a.name == "block_q"; });
  REQUIRE(block_q != info.axes.end());
  CHECK(block_q->tuning);
  CHECK_THAT(error_of([] { describe_op("flash_atention"); }), ContainsSubstring("not in this build"));
}

TEST_CASE("outputs are sized from the inputs, and a run by name matches the typed call", "[engine]") {
  Problem p;
  const Args in = p.inputs();
  const auto specs = output_specs("flash_attention", in);
  REQUIRE(specs.size() == 2);
  CHECK(specs[0].name == "out");
  CHECK(specs[0].shape == Dims{2, 33, 4, 64});
  CHECK(specs[1].shape == Dims{2, 4, 33});
  CHECK(specs[1].dtype == DType::f32);

  Tensor out = Tensor::empty(specs[0].shape, specs[0].dtype), lse = Tensor::empty(specs[1].shape, DType::f32);
  Args a = in;
  a.set("out", out.view()).set("lse", lse.view());
  const RunInfo info = run("flash_attention", a);
  FlashAttentionOptions opt;
  opt.causal = true;
  const FlashAttentionResult typed = flash_attention({p.q.view(), p.k.view(), p.v.view()}, opt);
  CHECK(info.key == typed.info.key);
  CHECK(std::memcmp(out.data(), typed.out.data(), out.nbytes()) == 0);
  CHECK(std::memcmp(lse.data(), typed.lse.data(), lse.nbytes()) == 0);
}

TEST_CASE("an output that shares memory with an argument is refused", "[engine]") {
  const Problem p;
  Tensor out = Tensor::empty({2, 33, 4, 64}, DType::f32), lse = Tensor::empty({2, 4, 33}, DType::f32);
  Args a = p.inputs();
  a.set("out", p.q.view()).set("lse", lse.view());  // out written over q, which it reads
  CHECK_THAT(error_of([&] { run("flash_attention", a); }), ContainsSubstring("flash_attention: out: overlaps the memory of q"));
  TensorView tail = out.view();  // lse inside out's last rows
  tail.data = out.data_as<float>() + out.numel() - lse.numel() / 2;
  tail.shape = lse.view().shape, tail.strides = lse.view().strides;
  a.set("out", out.view()).set("lse", tail);
  CHECK_THAT(error_of([&] { run("flash_attention", a); }), ContainsSubstring("out: overlaps the memory of lse"));
  TensorView rows = out.view();  // every query row of a head at one address
  rows.strides = {33 * 4 * 64, 0, 64, 1};
  a.set("out", rows).set("lse", lse.view());
  CHECK_THAT(error_of([&] { run("flash_attention", a); }), ContainsSubstring("an output's elements must not share memory"));
  a.set("out", out.view());
  CHECK_NOTHROW(run("flash_attention", a));
}

TEST_CASE("variant_key validates without memory or a run", "[engine]") {
  Args shapes;
  shapes.set("q", TensorView{nullptr, DType::bf16, {}, {1, 128, 8, 96}, contiguous_strides({1, 128, 8, 96})});
  shapes.set("k", TensorView{nullptr, DType::bf16, {}, {1, 128, 8, 96}, contiguous_strides({1, 128, 8, 96})});
  shapes.set("v", TensorView{nullptr, DType::bf16, {}, {1, 128, 8, 96}, contiguous_strides({1, 128, 8, 96})});
  shapes.set("sliding_window", int64_t{64});
  const std::string key = variant_key("flash_attention", shapes);
  CHECK_THAT(key, ContainsSubstring(".bf16.d96.") && ContainsSubstring(".win"));
  shapes.tune("block_q", 32);
  CHECK_THAT(variant_key("flash_attention", shapes), ContainsSubstring(".bq32."));
  CHECK_THAT(error_of([&] { Args a = shapes; a.tune("head_dim", 64); variant_key("flash_attention", a); }),
             ContainsSubstring("'head_dim' is not a tuning axis"));
  CHECK_THAT(error_of([&] { Args a = shapes; a.set("qq", shapes.tensors()[0].second); variant_key("flash_attention", a); }),
             ContainsSubstring("no tensor argument named 'qq'"));
  CHECK_THAT(error_of([&] { Args a = shapes; a.set("causal", int64_t{1}); variant_key("flash_attention", a); }),
             ContainsSubstring("causal: expected a value of type bool"));
}

TEST_CASE("the reference takes named arguments and returns every output", "[engine]") {
  Problem p;
  const auto ref = reference("flash_attention", p.inputs());
  REQUIRE(ref.size() == 2);
  CHECK(ref[0].values.size() == size_t(2 * 33 * 4 * 64));
  CHECK(ref[1].shape == Dims{2, 4, 33});
}

TEST_CASE("a plan runs other memory of the same signature and refuses another variant", "[engine][plan]") {
  Problem p, other;
  Tensor out = Tensor::empty({2, 33, 4, 64}, DType::f32), lse = Tensor::empty({2, 4, 33}, DType::f32);
  Args a = p.inputs();
  a.set("out", out.view()).set("lse", lse.view());
  const Plan plan = ejk::plan("flash_attention", a);
  CHECK_FALSE(plan.key().empty());
  Tensor out2 = Tensor::empty({2, 33, 4, 64}, DType::f32), lse2 = Tensor::empty({2, 4, 33}, DType::f32);
  Args b = other.inputs();
  b.set("out", out2.view()).set("lse", lse2.view());
  CHECK(plan.run(b, {}).key == plan.key());
  CHECK(run("flash_attention", a).key == plan.key());  // the same inputs by the plain call
  Args c = b;
  c.set("causal", false);  // another key: the plan refuses it rather than run the wrong kernel
  CHECK_THAT(error_of([&] { plan.run(c, {}); }), ContainsSubstring("need another variant than the plan's"));
}

TEST_CASE("the CPU runs on a caller's executor when the context gives one", "[engine][executor]") {
  Problem p;
  struct Pool {
    std::atomic<int64_t> tasks{0};
    static void parallel_for(void* self, int64_t n, void (*fn)(void*, int64_t, int64_t), void* arg) {
      auto* pool = static_cast<Pool*>(self);
      for (int64_t i = 0; i < n; ++i) fn(arg, i, i + 1);  // one range per task, serially
      pool->tasks += n;
    }
  } pool;
  CpuExecutor exec{&Pool::parallel_for, &pool};
  Context ctx;
  ctx.cpu_executor = &exec;
  FlashAttentionOptions opt;
  opt.causal = true;
  const FlashAttentionResult mine = flash_attention({p.q.view(), p.k.view(), p.v.view()}, opt, ctx);
  CHECK(pool.tasks > 1);
  const FlashAttentionResult ours = flash_attention({p.q.view(), p.k.view(), p.v.view()}, opt);
  CHECK(std::memcmp(mine.out.data(), ours.out.data(), mine.out.nbytes()) == 0);
}

TEST_CASE("a context naming another backend than the tensors' device is refused", "[engine]") {
  Problem p;
  Context ctx;
  ctx.backend = Backend::cuda;
  CHECK_THAT(error_of([&] { flash_attention({p.q.view(), p.k.view(), p.v.view()}, {}, ctx); }),
             ContainsSubstring("backend cuda was requested, but the tensors are on cpu"));
}

TEST_CASE("tensors past rank 8 and overflowing sizes are refused", "[engine]") {
  CHECK_THROWS_AS(Dims({1, 1, 1, 1, 1, 1, 1, 1, 1}), InvalidArgument);
  Problem p;
  FlashAttentionInputs in{p.q.view(), p.k.view(), p.v.view()};
  in.q.shape = {int64_t{1} << 40, int64_t{1} << 40, 4, 64};
  CHECK_THAT(error_of([&] { flash_attention(in); }), ContainsSubstring("q: shape") && ContainsSubstring("2^63"));
}

TEST_CASE("ejk_run calls any op by name through the C ABI", "[engine][c-abi]") {
  Problem p;
  Tensor out = Tensor::empty({2, 33, 4, 64}, DType::f32), lse = Tensor::empty({2, 4, 33}, DType::f32);
  const int64_t qs[4] = {2, 33, 4, 64}, ks[4] = {2, 47, 2, 64}, ls[3] = {2, 4, 33};
  ejk_tensor q{p.q.data(), EJK_F32, EJK_DEVICE_CPU, 0, 4, qs, nullptr}, k{p.k.data(), EJK_F32, EJK_DEVICE_CPU, 0, 4, ks, nullptr},
      v{p.v.data(), EJK_F32, EJK_DEVICE_CPU, 0, 4, ks, nullptr}, o{out.data(), EJK_F32, EJK_DEVICE_CPU, 0, 4, qs, nullptr},
      l{lse.data(), EJK_F32, EJK_DEVICE_CPU, 0, 3, ls, nullptr};
  ejk_arg args[] = {{"q", EJK_ARG_TENSOR, &q, {}, 0}, {"k", EJK_ARG_TENSOR, &k, {}, 0}, {"v", EJK_ARG_TENSOR, &v, {}, 0},
                    {"out", EJK_ARG_TENSOR, &o, {}, 0}, {"lse", EJK_ARG_TENSOR, &l, {}, 0},
                    {"causal", EJK_ARG_BOOL, nullptr, {1, 0}, 0}, {"block_q", EJK_ARG_TUNE, nullptr, {128, 0}, 0}};
  ejk_context ctx;
  ejk_context_init(&ctx);
  REQUIRE(ejk_run("flash_attention", args, 7, &ctx) == EJK_OK);
  FlashAttentionOptions opt;
  opt.causal = true;
  opt.block_q = 128;  // built in, and not the heuristic's 64 for 33 queries: the tuning is passed on
  const FlashAttentionResult typed = flash_attention({p.q.view(), p.k.view(), p.v.view()}, opt);
  CHECK(std::memcmp(out.data(), typed.out.data(), out.nbytes()) == 0);
  CHECK(ejk_run("no_such_op", args, 7, &ctx) == EJK_INVALID_ARGUMENT);
  CHECK_THAT(std::string(ejk_last_error()), ContainsSubstring("no_such_op"));
}

TEST_CASE("ejk_variant_key checks a call without data, as a binding does when it traces one", "[engine][c-abi]") {
  const int64_t qs[4] = {2, 33, 4, 64}, ks[4] = {2, 47, 2, 64}, bad[4] = {2, 47, 2, 32};
  ejk_tensor q{nullptr, EJK_F32, EJK_DEVICE_CPU, 0, 4, qs, nullptr}, k{nullptr, EJK_F32, EJK_DEVICE_CPU, 0, 4, ks, nullptr},
      v{nullptr, EJK_F32, EJK_DEVICE_CPU, 0, 4, bad, nullptr};
  ejk_arg args[] = {{"q", EJK_ARG_TENSOR, &q, {}, 0}, {"k", EJK_ARG_TENSOR, &k, {}, 0}, {"v", EJK_ARG_TENSOR, &k, {}, 0},
                    {"causal", EJK_ARG_BOOL, nullptr, {1, 0}, 0}};
  char key[256];
  REQUIRE(ejk_variant_key("flash_attention", args, 4, nullptr, key, sizeof(key)) == EJK_OK);
  Problem p;
  CHECK(std::string(key) == variant_key("flash_attention", p.inputs()));
  CHECK(ejk_variant_key("flash_attention", args, 4, nullptr, key, 8) == EJK_INVALID_ARGUMENT);
  CHECK_THAT(std::string(ejk_last_error()), ContainsSubstring("key_size"));
  args[2].tensor = &v;
  CHECK(ejk_variant_key("flash_attention", args, 4, nullptr, key, sizeof(key)) == EJK_INVALID_ARGUMENT);
  CHECK_THAT(std::string(ejk_last_error()), ContainsSubstring("v: dim 3 (D) must be 64"));
}

TEST_CASE("scalar ranges declared in the spec are refused by the binder, naming the argument", "[engine][ranges]") {
  Problem p;
  auto with = [&](const char* name, Scalar v) {
    Args a = p.inputs();
    a.set(name, v);
    return error_of([&] { output_specs("flash_attention", a); });
  };
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  // f32 scalars are checked as the f32 the kernels get: 1e300 would be inf there, 1e-300 zero.
  CHECK_THAT(with("softmax_scale", 1e300), ContainsSubstring("flash_attention: softmax_scale: 1e+300 is outside the f32 range"));
  CHECK_THAT(with("softmax_scale", nan), ContainsSubstring("softmax_scale: must be a number, got NaN"));
  CHECK_THAT(with("softmax_scale", inf), ContainsSubstring("softmax_scale: must be finite, got inf"));
  CHECK_THAT(with("logits_soft_cap", 1e-300), ContainsSubstring("logits_soft_cap: must be > 0 as an f32, got 1e-300"));
  CHECK_THAT(with("logits_soft_cap", -2.0), ContainsSubstring("logits_soft_cap: must be > 0, got -2"));
  CHECK_THAT(with("logits_soft_cap", nan), ContainsSubstring("logits_soft_cap: must be a number"));
  CHECK_THAT(with("sliding_window", std::array<int64_t, 2>{-1, 4}), ContainsSubstring("sliding_window (left): must be >= 0, got -1"));
  CHECK_THAT(with("sliding_window", std::array<int64_t, 2>{4, -3}), ContainsSubstring("sliding_window (right): must be >= 0, got -3"));
  CHECK_THAT(with("max_seqlen_q", int64_t{-1}), ContainsSubstring("max_seqlen_q: must be >= 0, got -1"));
  CHECK(with("softmax_scale", 3.0e38) == "no error");
  CHECK(with("logits_soft_cap", 1e-30) == "no error");
  // The typed API and the C ABI reach the same check.
  FlashAttentionOptions opt;
  opt.logits_soft_cap = float(nan);
  CHECK_THAT(error_of([&] { flash_attention({p.q.view(), p.k.view(), p.v.view()}, opt); }),
             ContainsSubstring("logits_soft_cap: must be a number"));
  const int64_t qs[4] = {2, 33, 4, 64}, ks[4] = {2, 47, 2, 64}, ls[3] = {2, 4, 33};
  Tensor out = Tensor::empty({2, 33, 4, 64}, DType::f32), lse = Tensor::empty({2, 4, 33}, DType::f32);
  ejk_tensor q{p.q.data(), EJK_F32, EJK_DEVICE_CPU, 0, 4, qs, nullptr}, k{p.k.data(), EJK_F32, EJK_DEVICE_CPU, 0, 4, ks, nullptr},
      v{p.v.data(), EJK_F32, EJK_DEVICE_CPU, 0, 4, ks, nullptr}, o{out.data(), EJK_F32, EJK_DEVICE_CPU, 0, 4, qs, nullptr},
      l{lse.data(), EJK_F32, EJK_DEVICE_CPU, 0, 3, ls, nullptr};
  ejk_flash_attention_options c;
  ejk_flash_attention_options_init(&c);
  c.has_logits_soft_cap = 1;
  c.logits_soft_cap = float(nan);  // before: read as "off"
  CHECK(ejk_flash_attention(nullptr, &q, &k, &v, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, &c, &o, &l) ==
        EJK_INVALID_ARGUMENT);
  CHECK_THAT(std::string(ejk_last_error()), ContainsSubstring("logits_soft_cap"));
  c.has_logits_soft_cap = 0;  // absent: the value is not read
  CHECK(ejk_flash_attention(nullptr, &q, &k, &v, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, &c, &o, &l) ==
        EJK_OK);
}

TEST_CASE("a window bound near INT64_MAX means no limit on that side, not an overflow", "[engine][window]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT (EJK_ENABLE_ORC_JIT=OFF): windowed f32 d64 is not built in");
  Problem p;
  const FlashAttentionInputs in{p.q.view(), p.k.view(), p.v.view()};
  auto run_with = [&](std::optional<SlidingWindow> w) {
    FlashAttentionOptions opt;
    opt.sliding_window = w;
    FlashAttentionResult r = flash_attention(in, opt);
    return std::vector<float>(r.out.data_as<float>(), r.out.data_as<float>() + r.out.numel());
  };
  const int64_t big = std::numeric_limits<int64_t>::max();
  const std::vector<float> right_open = run_with(SlidingWindow{0, big});
  CHECK(right_open == run_with(SlidingWindow{0, 47}));  // Sk: every later key visible
  CHECK(run_with(SlidingWindow{big, big}) == run_with(std::nullopt));
  CHECK(run_with(SlidingWindow{big - 1, 3}) == run_with(SlidingWindow{33, 3}));
  // And it is right: against the float64 reference of the same call.
  FlashAttentionOptions opt;
  opt.sliding_window = SlidingWindow{0, big};
  const FlashAttentionReference ref = flash_attention_reference(in, opt);
  double num = 0, den = 0;
  for (size_t i = 0; i < right_open.size(); ++i) {
    num += (right_open[i] - ref.out[i]) * (right_open[i] - ref.out[i]);
    den += ref.out[i] * ref.out[i];
  }
  REQUIRE(den > 0);
  CHECK(std::sqrt(num / den) <= 1e-5);
}

TEST_CASE("the allocating form binds once and matches the _into form", "[engine]") {
  Problem p;
  const FlashAttentionInputs in{p.q.view(), p.k.view(), p.v.view()};
  FlashAttentionOptions opt;
  opt.causal = true;
  const FlashAttentionResult r = flash_attention(in, opt);
  CHECK(r.out.shape() == Dims{2, 33, 4, 64});
  CHECK(r.lse.shape() == Dims{2, 4, 33});
  Tensor out = Tensor::empty(r.out.shape(), DType::f32), lse = Tensor::empty(r.lse.shape(), DType::f32);
  std::memset(out.data(), 0xff, out.nbytes());  // NaN poison
  std::memset(lse.data(), 0xff, lse.nbytes());
  const RunInfo info = flash_attention_into(in, opt, out.view(), lse.view());
  CHECK(info.key == r.info.key);
  CHECK(std::memcmp(out.data(), r.out.data(), out.nbytes()) == 0);
  CHECK(std::memcmp(lse.data(), r.lse.data(), lse.nbytes()) == 0);
  opt.block_q = -1;
  CHECK_THAT(error_of([&] { flash_attention(in, opt); }), ContainsSubstring("flash_attention: block_q: must be >= 0"));
}
