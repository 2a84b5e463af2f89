// The engine's internals as an op's code sees them: the op registry (linked through
// ejk_internal, whose objects a linker must not drop), element reads for the references,
// leading-dim folding, typed scalar accessors with spec defaults, OpDef's CUDA default and the
// per-call host plan (plan_metadata), and which ops autotune in the call.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <string>

#include "ejk/core/error.h"
#include "engine/bind.h"
#include "engine/call.h"
#include "engine/elements.h"
#include "engine/op_def.h"
#include "engine/tuning_store.h"
#include "registry.h"

using namespace ejk;
using Catch::Matchers::ContainsSubstring;

TEST_CASE("the op registry holds every public op of the specs, sorted by name") {
  std::set<std::string> spec_ops;
  for (const OpSchema* s : detail::all_op_schemas())
    if (!s->internal()) spec_ops.insert(s->api());
  REQUIRE(spec_ops.size() >= 4);
  std::set<std::string> registered;
  const auto& ops = engine::all_ops();
  for (const engine::OpDef* op : ops) registered.insert(op->name());
  CHECK(registered == spec_ops);
  CHECK(registered.size() == ops.size());
  CHECK(std::is_sorted(ops.begin(), ops.end(), [](auto* a, auto* b) { return a->name() < b->name(); }));
  CHECK(&engine::find_op("merge_attention_states") == &engine::find_op("merge_attention_states"));
  try {
    engine::find_op("no_such_op");
    FAIL("find_op accepted an unknown op");
  } catch (const InvalidArgument& e) {
    CHECK_THAT(e.what(), ContainsSubstring("no_such_op") && ContainsSubstring("flash_attention"));
  }
}

TEST_CASE("read_as_double reads every numeric dtype exactly") {
  const float f32[] = {-1.5f, 3.25e-7f};
  const double f64[] = {0.1, -2.0};
  const uint16_t bf16[] = {0x3f80, 0xc0a0};  // 1, -5
  // 1, the smallest subnormal 2^-24, -inf, a NaN
  const uint16_t f16[] = {0x3c00, 0x0001, 0xfc00, 0x7e00};
  const int32_t i32[] = {-7, 1 << 30};
  const int64_t i64[] = {int64_t{1} << 40, -3};
  CHECK(engine::read_as_double(f32, DType::f32, 1) == double(3.25e-7f));
  CHECK(engine::read_as_double(f64, DType::f64, 0) == 0.1);
  CHECK(engine::read_as_double(bf16, DType::bf16, 1) == -5.0);
  CHECK(engine::read_as_double(f16, DType::f16, 0) == 1.0);
  CHECK(engine::read_as_double(f16, DType::f16, 1) == std::ldexp(1.0, -24));
  CHECK(engine::read_as_double(f16, DType::f16, 2) == -std::numeric_limits<double>::infinity());
  CHECK(std::isnan(engine::read_as_double(f16, DType::f16, 3)));
  CHECK(engine::read_as_double(i32, DType::i32, 0) == -7.0);
  CHECK(engine::read_as_double(i64, DType::i64, 0) == 1099511627776.0);
  TensorView v;
  v.data = const_cast<int64_t*>(i64), v.dtype = DType::i64;
  CHECK(engine::read_as_double(v, 1) == -3.0);
  const uint8_t u8[] = {1};
  CHECK_THROWS_WITH(engine::read_as_double(u8, DType::u8, 0), ContainsSubstring("u8"));
}

namespace {

TensorView strided(Dims shape, Dims strides) {
  TensorView t;
  t.shape = shape, t.strides = strides;
  return t;
}

}  // namespace

TEST_CASE("fold_lead_dims merges leading dims where every tensor's strides allow") {
  // Leading [2, 1, 3, 4] over a trailing block of 10 elements.
  const Dims lead{2, 1, 3, 4};
  const TensorView a = strided({2, 1, 3, 4, 10}, {120, 120, 40, 10, 1});  // contiguous
  TensorView b = a;
  const TensorView* both[] = {&a, &b};
  engine::FoldedLead f = engine::fold_lead_dims(lead, both, 2);
  CHECK(f.rank == 1);
  CHECK(f.size[0] == 24);
  CHECK(f.stride[0][0] == 10);
  CHECK(f.count == 24);
  // b padded between its dims 2 and 3 (row pitch 48, not 40): dims 0..2 still merge, dim 3 apart.
  b = strided({2, 1, 3, 4, 10}, {144, 144, 48, 10, 1});
  f = engine::fold_lead_dims(lead, both, 2);
  REQUIRE(f.rank == 2);
  CHECK(f.size[0] == 6);
  CHECK(f.size[1] == 4);
  CHECK(f.stride[0][0] == 40);
  CHECK(f.stride[1][0] == 48);
  CHECK(f.stride[1][1] == 10);
  CHECK(f.count == 24);
  // No leading dims: one (empty) index.
  f = engine::fold_lead_dims(Dims{}, both, 2);
  CHECK(f.rank == 0);
  CHECK(f.count == 1);
}

TEST_CASE("typed scalar accessors give the value, else the spec's literal default") {
  const engine::OpDef& op = engine::find_op("flash_attention");
  engine::ArgPack pack;
  engine::Bound b;
  b.op = &op, b.args = &pack;
  const int causal = op.scalar("causal"), norm = op.scalar("normalize_output");
  const int scale = op.scalar("softmax_scale"), window = op.scalar("sliding_window");
  const int max_q = op.scalar("max_seqlen_q");
  CHECK_FALSE(b.given(causal));
  CHECK(b.flag(causal) == false);  // default: "false"
  CHECK(b.flag(norm) == true);     // default: "true"
  pack.scalars[causal] = true;
  CHECK(b.given(causal));
  CHECK(b.flag(causal) == true);
  // A formula ("1/sqrt(D)") or none is no value: the op must test given() first.
  CHECK_THROWS_WITH(b.f64(scale), ContainsSubstring("softmax_scale") && ContainsSubstring("1/sqrt(D)"));
  CHECK_THROWS_WITH(b.pair(window), ContainsSubstring("sliding_window"));
  pack.scalars[scale] = int64_t{2};
  CHECK(b.f64(scale) == 2.0);
  pack.scalars[scale] = 0.125;
  CHECK(b.f64(scale) == 0.125);
  pack.scalars[window] = int64_t{5};
  CHECK(b.pair(window) == std::array<int64_t, 2>{5, 5});
  pack.scalars[window] = std::array<int64_t, 2>{7, 0};
  CHECK(b.pair(window) == std::array<int64_t, 2>{7, 0});
  pack.scalars[max_q] = int64_t{77};
  CHECK(b.i64(max_q) == 77);
}

namespace {

// An op of the test's own over merge_attention_states's spec that supplies no CUDA launch.
class NoCudaOp final : public engine::OpDef {
 public:
  NoCudaOp() : OpDef("merge_states") {}
  engine::CpuWork cpu_prepare(const engine::Bound&, const engine::PlanData&, void*) const override { return {}; }
  void reference(const engine::Bound&, double* const*) const override {}
};

}  // namespace

TEST_CASE("OpDef's default CUDA launch reports BackendUnavailable naming the op") {
  const NoCudaOp op;
  engine::ArgPack pack;
  engine::Bound b;
  b.op = &op, b.args = &pack;
  engine::PlanData plan;
  // The default reads nothing of the launch context; any storage stands in for one.
  alignas(64) unsigned char storage[64] = {};
  auto& lc = *reinterpret_cast<engine::CudaLaunchContext*>(storage);
  try {
    op.cuda_launch(b, plan, lc);
    FAIL("the default CUDA launch returned");
  } catch (const BackendUnavailable& e) {
    CHECK_THAT(e.what(), ContainsSubstring("merge_attention_states"));
#if !EJK_HAVE_CUDA
    CHECK_THAT(e.what(), ContainsSubstring("EJK_ENABLE_CUDA=OFF"));
#endif
  }
}

TEST_CASE("a call's argument pack stays small with room for 32 tensors") {
  static_assert(engine::kMaxTensors >= 32);
  // ArgPack is built and zeroed per call: pointers to the views, not the views.
  CHECK(sizeof(engine::ArgPack) <= 1024);
}

namespace {

// A test-only op over mean_pooling's spec whose host plan is its sequences' lengths (as a paged
// or ragged op plans block tables and work lists from cu_seqlens); its CPU prepare records what
// it sees and runs no task.
class PlannedLengthsOp final : public engine::OpDef {
 public:
  PlannedLengthsOp() : OpDef("mean_pool_fwd"), cu_seqlens(tensor("cu_seqlens")), sym_N(symbol("N")) {}
  bool uses_plan_metadata() const override { return true; }
  void plan_metadata(const engine::Bound& b, const engine::PlanData&, std::vector<unsigned char>& blob) const override {
    const auto* cu = static_cast<const int32_t*>(b.data(cu_seqlens));
    for (int64_t s = 0; s < b.size(sym_N); ++s) {
      const int64_t len = cu[s + 1] - cu[s];
      const auto* bytes = reinterpret_cast<const unsigned char*>(&len);
      blob.insert(blob.end(), bytes, bytes + sizeof len);
    }
  }
  engine::CpuWork cpu_prepare(const engine::Bound& b, const engine::PlanData&, void*) const override {
    seen.clear();
    REQUIRE(b.metadata != nullptr);
    seen.resize(b.metadata->size() / sizeof(int64_t));
    std::memcpy(seen.data(), b.metadata->data(), seen.size() * sizeof(int64_t));
    return {0};
  }
  void reference(const engine::Bound&, double* const*) const override {}

  const int cu_seqlens, sym_N;
  mutable std::vector<int64_t> seen;
};

}  // namespace

TEST_CASE("plan_metadata plans each call from its host metadata, read by the call's prepare") {
  const PlannedLengthsOp op;
  Tensor x = Tensor::empty({10, 8}, DType::f32), out = Tensor::empty({3, 8}, DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = float(i % 7) - 3.0f;
  Tensor cu = Tensor::empty({4}, DType::i32);
  auto run = [&](std::initializer_list<int32_t> cuts) {
    std::copy(cuts.begin(), cuts.end(), cu.data_as<int32_t>());
    Args a;
    a.set("x", x.view()).set("cu_seqlens", cu.view()).set("out", out.view());
    engine::call(op, engine::pack_args(op, a), Context{});
    return op.seen;
  };
  CHECK(run({0, 2, 7, 10}) == std::vector<int64_t>{2, 5, 3});
  // Same key inputs, so the same cached plan: the blob is still this call's own.
  CHECK(run({0, 0, 9, 10}) == std::vector<int64_t>{0, 9, 1});
  // Ops that plan nothing see no blob (the registered mean_pooling runs as before).
  CHECK_FALSE(engine::find_op("mean_pooling").uses_plan_metadata());
}

TEST_CASE("autotune: a set value replaces EJK_AUTOTUNE; a list names the ops that autotune", "[engine][tune]") {
  namespace tuning = engine::tuning;
  tuning::set_autotune("1");
  CHECK(tuning::autotune_enabled("flash_attention_backward"));
  tuning::set_autotune("flash_attention");
  CHECK(tuning::autotune_enabled("flash_attention"));
  CHECK_FALSE(tuning::autotune_enabled("flash_attention_backward"));
  CHECK(tuning::autotune_enabled());  // some op autotunes
  tuning::set_autotune("flash_attention,flash_attention_backward");
  CHECK(tuning::autotune_enabled("flash_attention_backward"));
  // A name that is no op is refused and changes nothing.
  CHECK_THROWS_WITH(tuning::set_autotune("flash_atention"), ContainsSubstring("'flash_atention' is not an op"));
  CHECK(tuning::autotune_enabled("flash_attention_backward"));
  CHECK_THROWS_AS(tuning::set_autotune("flash_attention,"), InvalidArgument);
  tuning::set_autotune("off");
  CHECK_FALSE(tuning::autotune_enabled("flash_attention"));
  tuning::set_autotune(std::nullopt);  // EJK_AUTOTUNE again (unset in the tests: off)
  CHECK_FALSE(tuning::autotune_enabled("flash_attention"));
}
