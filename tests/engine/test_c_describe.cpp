// The C ABI's op descriptions (ejk_op_count/name, ejk_describe_op, ejk_output_specs): what the
// language bindings read instead of per-op code. Only ejk.h is used, as a C caller would.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cstring>
#include <set>
#include <string>

#include "ejk/ejk.h"

using Catch::Matchers::ContainsSubstring;

namespace {

const ejk_param_info* find(const ejk_op_info& info, const char* name) {
  for (int32_t i = 0; i < info.num_params; ++i)
    if (std::strcmp(info.params[i].name, name) == 0) return &info.params[i];
  return nullptr;
}

ejk_tensor shaped(const int64_t* shape, int32_t rank, int32_t dtype = EJK_F32) {
  return ejk_tensor{nullptr, dtype, EJK_DEVICE_CPU, 0, rank, shape, nullptr};
}

}  // namespace

TEST_CASE("C ABI: the op list names every op once, sorted", "[engine][c-abi][describe]") {
  const int32_t n = ejk_op_count();
  REQUIRE(n >= 4);
  std::set<std::string> names;
  std::string previous;
  for (int32_t i = 0; i < n; ++i) {
    const char* name = ejk_op_name(i);
    REQUIRE(name != nullptr);
    CHECK(previous < name);
    previous = name;
    names.insert(name);
  }
  CHECK(names.count("flash_attention") == 1);
  CHECK(names.count("mean_pooling_backward") == 1);
  CHECK(ejk_op_name(n) == nullptr);
  CHECK(ejk_op_name(-1) == nullptr);
}

TEST_CASE("C ABI: ejk_describe_op gives the spec's arguments in order", "[engine][c-abi][describe]") {
  ejk_op_info info{};
  REQUIRE(ejk_describe_op("flash_attention", &info) == EJK_OK);
  CHECK(std::string(info.name) == "flash_attention");
  REQUIRE(info.num_params > 5);
  CHECK(std::string(info.params[0].name) == "q");
  CHECK(std::string(info.params[1].name) == "k");
  CHECK(std::string(info.params[2].name) == "v");
  CHECK(info.params[0].role == EJK_PARAM_INPUT);
  CHECK(info.params[0].optional == 0);
  const ejk_param_info* bias = find(info, "bias");
  REQUIRE(bias != nullptr);
  CHECK(bias->optional == 1);
  CHECK(bias->contiguous == 0);
  const ejk_param_info* cu = find(info, "cum_seqlens_q");
  REQUIRE(cu != nullptr);
  CHECK(cu->contiguous == 1);
  CHECK(std::string(cu->type) == "i32");
  const ejk_param_info* lse = find(info, "lse");
  REQUIRE(lse != nullptr);
  CHECK(lse->role == EJK_PARAM_OUTPUT);
  CHECK(std::string(lse->type) == "f32");
  const ejk_param_info* window = find(info, "sliding_window");
  REQUIRE(window != nullptr);
  CHECK(window->role == EJK_PARAM_SCALAR);
  CHECK(std::string(window->type) == "i64[2]");
  CHECK(window->optional == 1);
  const ejk_param_info* causal = find(info, "causal");
  REQUIRE(causal != nullptr);
  CHECK(std::string(causal->type) == "bool");
  CHECK(std::string(causal->default_value) == "false");
  CHECK(causal->optional == 0);

  // The tuning axes a caller may set come last; the head_dim axis, fixed by D, is none of them.
  const ejk_param_info* block_q = find(info, "block_q");
  REQUIRE(block_q != nullptr);
  CHECK(block_q->role == EJK_PARAM_TUNING);
  CHECK(std::string(block_q->type) == "i64");
  CHECK(block_q->optional == 1);
  CHECK(block_q == info.params + info.num_params - 2);
  CHECK(find(info, "block_k")->role == EJK_PARAM_TUNING);
  CHECK(find(info, "head_dim") == nullptr);
  ejk_op_info pooling{};
  REQUIRE(ejk_describe_op("mean_pooling", &pooling) == EJK_OK);
  for (int32_t i = 0; i < pooling.num_params; ++i) CHECK(pooling.params[i].role != EJK_PARAM_TUNING);

  // The same storage again: bindings may keep the pointers.
  ejk_op_info again{};
  REQUIRE(ejk_describe_op("flash_attention", &again) == EJK_OK);
  CHECK(again.params == info.params);

  CHECK(ejk_describe_op("no_such_op", &info) == EJK_INVALID_ARGUMENT);
  CHECK_THAT(std::string(ejk_last_error()), ContainsSubstring("no_such_op") && ContainsSubstring("mean_pooling"));
  CHECK(ejk_describe_op("flash_attention", nullptr) == EJK_INVALID_ARGUMENT);
  CHECK(ejk_describe_op(nullptr, &info) == EJK_INVALID_ARGUMENT);
}

TEST_CASE("C ABI: ejk_output_specs gives shapes and dtypes from the inputs", "[engine][c-abi][describe]") {
  const int64_t qs[4] = {2, 33, 4, 64}, ks[4] = {2, 47, 2, 64};
  const ejk_tensor q = shaped(qs, 4, EJK_BF16), k = shaped(ks, 4, EJK_BF16);
  ejk_arg args[] = {{"q", EJK_ARG_TENSOR, &q, {}, 0}, {"k", EJK_ARG_TENSOR, &k, {}, 0},
                    {"v", EJK_ARG_TENSOR, &k, {}, 0}, {"causal", EJK_ARG_BOOL, nullptr, {1, 0}, 0}};
  ejk_output_spec specs[4];
  int32_t n = -1;
  REQUIRE(ejk_output_specs("flash_attention", args, 4, nullptr, specs, 4, &n) == EJK_OK);
  REQUIRE(n == 2);
  CHECK(std::string(specs[0].name) == "out");
  CHECK(specs[0].dtype == EJK_BF16);
  REQUIRE(specs[0].rank == 4);
  CHECK((specs[0].shape[0] == 2 && specs[0].shape[1] == 33 && specs[0].shape[2] == 4 && specs[0].shape[3] == 64));
  CHECK(std::string(specs[1].name) == "lse");
  CHECK(specs[1].dtype == EJK_F32);
  REQUIRE(specs[1].rank == 3);
  CHECK((specs[1].shape[0] == 2 && specs[1].shape[1] == 4 && specs[1].shape[2] == 33));

  SECTION("too small an array says how many outputs there are") {
    CHECK(ejk_output_specs("flash_attention", args, 4, nullptr, specs, 1, &n) == EJK_INVALID_ARGUMENT);
    CHECK(n == 2);
    CHECK_THAT(std::string(ejk_last_error()), ContainsSubstring("capacity"));
  }
  SECTION("inputs are validated, naming the argument") {
    const int64_t bad[4] = {2, 47, 2, 32};
    const ejk_tensor v = shaped(bad, 4, EJK_BF16);
    args[2].tensor = &v;
    CHECK(ejk_output_specs("flash_attention", args, 4, nullptr, specs, 4, &n) == EJK_INVALID_ARGUMENT);
    CHECK_THAT(std::string(ejk_last_error()), ContainsSubstring("v"));
  }
  SECTION("a size no input has comes from a scalar") {
    const int64_t gs[2] = {3, 16};
    const ejk_tensor g = shaped(gs, 2);
    const ejk_arg bwd[] = {{"g", EJK_ARG_TENSOR, &g, {}, 0}, {"num_tokens", EJK_ARG_INT, nullptr, {7, 0}, 0}};
    REQUIRE(ejk_output_specs("mean_pooling_backward", bwd, 2, nullptr, specs, 4, &n) == EJK_OK);
    REQUIRE(n == 1);
    CHECK(std::string(specs[0].name) == "dx");
    REQUIRE(specs[0].rank == 3);
    CHECK((specs[0].shape[0] == 3 && specs[0].shape[1] == 7 && specs[0].shape[2] == 16));
  }
  SECTION("bad arrays are refused") {
    CHECK(ejk_output_specs("flash_attention", args, 4, nullptr, nullptr, 4, &n) == EJK_INVALID_ARGUMENT);
    CHECK(ejk_output_specs("flash_attention", args, 4, nullptr, specs, 4, nullptr) == EJK_INVALID_ARGUMENT);
    CHECK(ejk_output_specs("no_such_op", args, 4, nullptr, specs, 4, &n) == EJK_INVALID_ARGUMENT);
    CHECK(ejk_output_specs("flash_attention", nullptr, 4, nullptr, specs, 4, &n) == EJK_INVALID_ARGUMENT);
  }
}
