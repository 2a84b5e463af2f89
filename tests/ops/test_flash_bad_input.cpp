// Bad input gets an InvalidArgument naming the argument and what was expected; nothing crashes.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "ejk/core/error.h"
#include "ejk/ejk.h"
#include "flash_case.h"
#include "flash_dispatch.h"  // runtime/src: the variant guard below
#include "registry.h"

using namespace ejk;
using Catch::Matchers::ContainsSubstring;

namespace {

cli::FlashCase small_case(bool varlen = false) {
  cli::FlashCaseSpec s;
  s.b = 2; s.sq = 9; s.sk = 11; s.hq = 4; s.hkv = 2; s.d = 64; s.seed = 7;
  s.varlen = varlen;
  return cli::make_random_case(s);
}

std::string error_of(const FlashAttentionInputs& in, const FlashAttentionOptions& opt = {}) {
  try {
    flash_attention(in, opt);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no error";
}

TensorView reshaped(TensorView v, std::vector<int64_t> shape) {
  v.shape = std::move(shape);
  v.strides = contiguous_strides(v.shape);
  return v;
}

}  // namespace

TEST_CASE("wrong rank names the argument and the layout", "[flash][errors]") {
  auto c = small_case();
  auto in = c.inputs();
  in.q = reshaped(in.q, {2 * 9, 4, 64});
  auto msg = error_of(in);
  CHECK_THAT(msg, ContainsSubstring("q:") && ContainsSubstring("rank 4") && ContainsSubstring("[B, Sq, Hq, D]"));
}

TEST_CASE("shape mismatch between k and v", "[flash][errors]") {
  auto c = small_case();
  auto in = c.inputs();
  in.v = reshaped(in.v, {2, 10, 2, 64});
  CHECK_THAT(error_of(in), ContainsSubstring("v:") && ContainsSubstring("shape of k"));
}

TEST_CASE("Hq not a multiple of Hkv", "[flash][errors]") {
  cli::FlashCaseSpec s;
  s.b = 1; s.sq = 5; s.sk = 5; s.hq = 6; s.hkv = 4; s.d = 64;
  auto c = cli::make_random_case(s);
  CHECK_THAT(error_of(c.inputs()), ContainsSubstring("kv heads (4)") && ContainsSubstring("q heads (6)"));
}

TEST_CASE("head_dim mismatch between q and k", "[flash][errors]") {
  auto c = small_case();
  auto in = c.inputs();
  in.k = reshaped(in.k, {2, 11, 4, 32});
  in.v = in.k;
  CHECK_THAT(error_of(in), ContainsSubstring("k: head_dim must equal q's head_dim 64, got 32"));
}

TEST_CASE("dtype mismatch between q and k", "[flash][errors]") {
  auto c = small_case();
  auto in = c.inputs();
  in.k.dtype = DType::bf16;
  CHECK_THAT(error_of(in), ContainsSubstring("k: expected dtype f32, got bf16"));
}

TEST_CASE("non-monotone cum_seqlens", "[flash][errors]") {
  auto c = small_case(true);
  auto* cu = c.cum_seqlens_q.data_as<int32_t>();
  cu[1] = 8; cu[2] = 3;  // total is 9: 0, 8, 3 breaks monotonicity
  CHECK_THAT(error_of(c.inputs()), ContainsSubstring("cum_seqlens_q: must be non-decreasing"));
}

TEST_CASE("negative window", "[flash][errors]") {
  auto c = small_case();
  FlashAttentionOptions opt;
  opt.sliding_window = SlidingWindow{-1, 4};
  CHECK_THAT(error_of(c.inputs(), opt), ContainsSubstring("sliding_window: left and right must be >= 0"));
}

TEST_CASE("bias of the wrong shape", "[flash][errors]") {
  auto c = small_case();
  Tensor bias = Tensor::empty({2, 4, 9, 10}, DType::f32);
  auto in = c.inputs();
  in.bias = bias.view();
  CHECK_THAT(error_of(in), ContainsSubstring("bias: dimension 3 (Sk) must be 11, got 10"));
}

TEST_CASE("unsupported head_dim names the axis and the allowed values", "[flash][errors]") {
  cli::FlashCaseSpec s;
  s.b = 1; s.sq = 5; s.sk = 5; s.hq = 2; s.hkv = 2; s.d = 13;
  auto c = cli::make_random_case(s);
  CHECK_THAT(error_of(c.inputs()), ContainsSubstring("head_dim"));
}

TEST_CASE("C ABI reports errors through status and ejk_last_error", "[flash][errors][c-abi]") {
  auto c = small_case();
  int64_t qshape[3] = {18, 4, 64};
  ejk_tensor q{c.q.data(), EJK_F32, EJK_DEVICE_CPU, 0, 3, qshape, nullptr};
  int64_t kshape[4] = {2, 11, 2, 64};
  ejk_tensor k{c.k.data(), EJK_F32, EJK_DEVICE_CPU, 0, 4, kshape, nullptr};
  ejk_tensor v{c.v.data(), EJK_F32, EJK_DEVICE_CPU, 0, 4, kshape, nullptr};
  int64_t lshape[3] = {2, 4, 9};
  Tensor lse = Tensor::empty({2, 4, 9}, DType::f32);
  ejk_tensor l{lse.data(), EJK_F32, EJK_DEVICE_CPU, 0, 3, lshape, nullptr};
  int status = ejk_flash_attention(&q, &k, &v, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                   nullptr, &q, &l);
  CHECK(status == EJK_INVALID_ARGUMENT);
  CHECK_THAT(std::string(ejk_last_error()), ContainsSubstring("q:"));
}

TEST_CASE("segment ids never run on a variant compiled without them", "[flash][errors][segments]") {
  // The op keys a call with ids as .seg; a key without the flag (ejk compile, an explicit key)
  // has no segment code, so it must be refused rather than run with the ids ignored.
  const OpSchema& schema = detail::op_schema("flash_fwd");
  VariantKey key = schema.parse_key("flash_fwd.cpu.generic.f32.d64.bq64.bk64.causal");
  const int32_t ids[2] = {0, 1};
  FlashFwdParams p{};
  p.q_segment_ids = ids, p.kv_segment_ids = ids;
  try {
    detail::require_variant_covers(key, p);
    FAIL("segment ids accepted by a variant without the segments flag");
  } catch (const InvalidArgument& e) {
    CHECK_THAT(std::string(e.what()), ContainsSubstring("flash_fwd.cpu.generic.f32.d64.bq64.bk64.causal") &&
                                          ContainsSubstring(".seg"));
  }
  key.set_flag("segments", true);
  CHECK_NOTHROW(detail::require_variant_covers(key, p));
  p.q_segment_ids = p.kv_segment_ids = nullptr;  // a .seg variant also runs without ids
  CHECK_NOTHROW(detail::require_variant_covers(key, p));
}
