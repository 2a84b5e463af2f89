// Bad input gets an InvalidArgument naming the argument and what was expected; nothing crashes.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "ejk/core/error.h"
#include "ejk/ejk.h"
#include "flash_problem.h"
#include "ejk/op.h"

using namespace ejk;
using Catch::Matchers::ContainsSubstring;

namespace {

test::FlashCase small_case(bool varlen = false) {
  test::FlashCaseSpec s;
  s.b = 2; s.sq = 9; s.sk = 11; s.hq = 4; s.hkv = 2; s.d = 64; s.seed = 7;
  s.varlen = varlen;
  return test::make_random_case(s);
}

std::string error_of(const FlashAttentionInputs& in, const FlashAttentionOptions& opt = {}) {
  try {
    flash_attention(in, opt);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no error";
}

TensorView reshaped(TensorView v, Dims shape) {
  v.shape = shape;
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
  CHECK_THAT(error_of(in), ContainsSubstring("v: dim 1 (Sk) must be 11 as in k, got 10"));
}

TEST_CASE("Hq not a multiple of Hkv", "[flash][errors]") {
  test::FlashCaseSpec s;
  s.b = 1; s.sq = 5; s.sk = 5; s.hq = 6; s.hkv = 4; s.d = 64;
  auto c = test::make_random_case(s);
  CHECK_THAT(error_of(c.inputs()), ContainsSubstring("kv heads (4)") && ContainsSubstring("q heads (6)"));
}

TEST_CASE("head_dim mismatch between q and k", "[flash][errors]") {
  auto c = small_case();
  auto in = c.inputs();
  in.k = reshaped(in.k, {2, 11, 4, 32});
  in.v = in.k;
  CHECK_THAT(error_of(in), ContainsSubstring("k: dim 3 (D) must be 64 as in q, got 32"));
}

TEST_CASE("dtype mismatch between q and k", "[flash][errors]") {
  auto c = small_case();
  auto in = c.inputs();
  in.k.dtype = DType::bf16;
  CHECK_THAT(error_of(in), ContainsSubstring("k: expected dtype f32 (as q), got bf16"));
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
  CHECK_THAT(error_of(c.inputs(), opt), ContainsSubstring("sliding_window (left): must be >= 0, got -1"));
}

TEST_CASE("bias of the wrong shape", "[flash][errors]") {
  auto c = small_case();
  Tensor bias = Tensor::empty({2, 4, 9, 10}, DType::f32);
  auto in = c.inputs();
  in.bias = bias.view();
  CHECK_THAT(error_of(in), ContainsSubstring("bias: dim 3 (Sk) must be 11 as in k, got 10"));
}

TEST_CASE("unsupported head_dim names the axis and the allowed values", "[flash][errors]") {
  test::FlashCaseSpec s;
  s.b = 1; s.sq = 5; s.sk = 5; s.hq = 2; s.hkv = 2; s.d = 13;
  auto c = test::make_random_case(s);
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
  int status = ejk_flash_attention(nullptr, &q, &k, &v, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                   nullptr, &q, &l);
  CHECK(status == EJK_INVALID_ARGUMENT);
  CHECK_THAT(std::string(ejk_last_error()), ContainsSubstring("q:"));
}

TEST_CASE("the key's flags come from the arguments: segment ids run a .seg variant", "[flash][errors][segments]") {
  // A kernel without the segments flag has no segment code: the key is built from the bound
  // arguments, so a call with ids can only run a .seg key.
  test::FlashCaseSpec s;
  s.b = 1; s.sq = 16; s.sk = 16; s.hq = 2; s.hkv = 2; s.d = 64; s.segments = true;
  auto c = test::make_random_case(s);
  Args args;
  args.set("q", c.q.view()).set("k", c.k.view()).set("v", c.v.view());
  CHECK(variant_key("flash_attention", args).find(".seg") == std::string::npos);
  args.set("q_segment_ids", c.q_segment_ids.view()).set("kv_segment_ids", c.kv_segment_ids.view());
  CHECK(variant_key("flash_attention", args).find(".seg") != std::string::npos);
}

TEST_CASE("segment ids come in pairs; varlen excludes them", "[flash][errors]") {
  test::FlashCaseSpec s;
  s.b = 1; s.sq = 16; s.sk = 16; s.hq = 2; s.hkv = 2; s.d = 64; s.segments = true;
  auto c = test::make_random_case(s);
  auto in = c.inputs();
  in.kv_segment_ids.reset();
  CHECK_THAT(error_of(in), ContainsSubstring("kv_segment_ids: q_segment_ids and kv_segment_ids are given together"));
  auto v = small_case(true);
  auto vin = v.inputs();
  vin.bias = Tensor::empty({1, 4, 9, 11}, DType::f32).view();
  CHECK_THAT(error_of(vin), ContainsSubstring("bias: not supported with cum_seqlens_q (varlen mode)"));
  vin.bias.reset();
  vin.cum_seqlens_k.reset();
  CHECK_THAT(error_of(vin), ContainsSubstring("cum_seqlens_k: required when cum_seqlens_q is given"));
}

TEST_CASE("sinks must be f32 and [S] or [Hq, S]", "[flash][errors][sinks]") {
  auto c = small_case();
  auto in = c.inputs();
  Tensor bad = Tensor::empty({3, 1}, DType::f32);
  in.softmax_aux = bad.view();
  CHECK_THAT(error_of(in), ContainsSubstring("softmax_aux: dim 0 (Hq) must be 4 as in q, got 3"));
  Tensor half = Tensor::empty({4, 1}, DType::bf16);
  in.softmax_aux = half.view();
  CHECK_THAT(error_of(in), ContainsSubstring("softmax_aux: expected dtype f32, got bf16"));
}

TEST_CASE("max_seqlen must bound the packed sequences", "[flash][errors][varlen]") {
  auto c = small_case(true);
  FlashAttentionOptions opt;
  opt.max_seqlen_q = 1;  // the random lengths of 9 rows over 2 sequences exceed 1
  CHECK_THAT(error_of(c.inputs(), opt), ContainsSubstring("max_seqlen_q: is 1, but a sequence has"));
  opt.max_seqlen_q = 100;
  CHECK_THAT(error_of(c.inputs(), opt), ContainsSubstring("max_seqlen_q: must be in [0, 9]"));
  auto d = small_case();
  FlashAttentionOptions dense;
  dense.max_seqlen_k = 3;
  CHECK_THAT(error_of(d.inputs(), dense), ContainsSubstring("max_seqlen_k: only with cum_seqlens_q"));
}

TEST_CASE("C ABI: versioned options take only the sizes of versions this library knows", "[flash][errors][c-abi]") {
  auto c = small_case();
  int64_t qshape[4] = {2, 9, 4, 64}, kshape[4] = {2, 11, 2, 64}, lshape[3] = {2, 4, 9};
  Tensor out = Tensor::empty({2, 9, 4, 64}, DType::f32), lse = Tensor::empty({2, 4, 9}, DType::f32);
  ejk_tensor q{c.q.data(), EJK_F32, EJK_DEVICE_CPU, 0, 4, qshape, nullptr};
  ejk_tensor k{c.k.data(), EJK_F32, EJK_DEVICE_CPU, 0, 4, kshape, nullptr};
  ejk_tensor v{c.v.data(), EJK_F32, EJK_DEVICE_CPU, 0, 4, kshape, nullptr};
  ejk_tensor o{out.data(), EJK_F32, EJK_DEVICE_CPU, 0, 4, qshape, nullptr};
  ejk_tensor l{lse.data(), EJK_F32, EJK_DEVICE_CPU, 0, 3, lshape, nullptr};
  struct Newer {  // a caller compiled against a header with one more field
    ejk_flash_attention_options known;
    int64_t future_field;
  } newer{};
  ejk_flash_attention_options_init(&newer.known);
  newer.known.block_q = 64;  // a built-in tile (the heuristic's 32 for 9 queries needs the CPU JIT)
  newer.known.struct_size = sizeof(Newer);
  // A size the library does not know could be anything up to the end of a page: refused,
  // whatever the extra bytes hold, so nothing past the caller's struct is ever read.
  for (int64_t future : {0, 5}) {
    newer.future_field = future;
    CHECK(ejk_flash_attention(nullptr, &q, &k, &v, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                              &newer.known, &o, &l) == EJK_INVALID_ARGUMENT);
    CHECK_THAT(std::string(ejk_last_error()), ContainsSubstring("ejk_flash_attention_options: struct_size"));
  }
  newer.known.struct_size = 65536;
  CHECK(ejk_flash_attention(nullptr, &q, &k, &v, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, &newer.known,
                            &o, &l) == EJK_INVALID_ARGUMENT);
  ejk_flash_attention_options_init(&newer.known);
  newer.known.block_q = 64;
  CHECK(ejk_flash_attention(nullptr, &q, &k, &v, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, &newer.known,
                            &o, &l) == EJK_OK);
  CHECK(ejk_abi_version() == EJK_ABI_VERSION);
}
