// The C ABI's edges, each a known reproducer: a struct_size past the caller's struct, negative
// dims, an argument given twice, an absurd variant count. Each is EJK_INVALID_ARGUMENT with a
// message naming the struct, tensor or argument; none reads memory it was not given.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <string>

#include "ejk/ejk.h"

using Catch::Matchers::ContainsSubstring;

namespace {

const int64_t kQ[4] = {1, 16, 2, 64}, kK[4] = {1, 16, 1, 64};

int key_of(const ejk_arg* args, int32_t n, const ejk_context* ctx = nullptr) {
  char key[256];
  return ejk_variant_key("flash_attention", args, n, ctx, key, sizeof(key));
}

}  // namespace

TEST_CASE("C ABI: a struct_size no version has is refused, not read", "[c-abi][harden]") {
  // The context sits at the very end of a readable page; the next page is inaccessible.
  const long page = ::sysconf(_SC_PAGESIZE);
  void* mem = ::mmap(nullptr, size_t(2 * page), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(mem != MAP_FAILED);
  REQUIRE(::mprotect(static_cast<char*>(mem) + page, size_t(page), PROT_NONE) == 0);
  auto* ctx = new (static_cast<char*>(mem) + page - sizeof(ejk_context)) ejk_context;
  ejk_context_init(ctx);
  ejk_tensor q{nullptr, EJK_F32, EJK_DEVICE_CPU, 0, 4, kQ, nullptr}, k{nullptr, EJK_F32, EJK_DEVICE_CPU, 0, 4, kK, nullptr};
  const ejk_arg args[] = {{"q", EJK_ARG_TENSOR, &q, {}, 0}, {"k", EJK_ARG_TENSOR, &k, {}, 0}, {"v", EJK_ARG_TENSOR, &k, {}, 0}};
  CHECK(key_of(args, 3, ctx) == EJK_OK);
  for (uint32_t size : {65536u, uint32_t(sizeof(ejk_context) + 8), 4u, 0u}) {
    ctx->struct_size = size;
    CHECK(key_of(args, 3, ctx) == EJK_INVALID_ARGUMENT);
    CHECK_THAT(std::string(ejk_last_error()), ContainsSubstring("ejk_context: struct_size"));
  }
  ::munmap(mem, size_t(2 * page));
}

TEST_CASE("C ABI: a negative dim is refused naming the tensor", "[c-abi][harden]") {
  const int64_t bad[4] = {1, -16, 2, 64};
  ejk_tensor q{nullptr, EJK_F32, EJK_DEVICE_CPU, 0, 4, bad, nullptr}, k{nullptr, EJK_F32, EJK_DEVICE_CPU, 0, 4, kK, nullptr};
  const ejk_arg args[] = {{"q", EJK_ARG_TENSOR, &q, {}, 0}, {"k", EJK_ARG_TENSOR, &k, {}, 0}, {"v", EJK_ARG_TENSOR, &k, {}, 0}};
  CHECK(key_of(args, 3) == EJK_INVALID_ARGUMENT);
  CHECK_THAT(std::string(ejk_last_error()), ContainsSubstring("q: dim 1 is -16"));
}

TEST_CASE("C ABI: an argument given twice is refused", "[c-abi][harden]") {
  ejk_tensor q{nullptr, EJK_F32, EJK_DEVICE_CPU, 0, 4, kQ, nullptr}, k{nullptr, EJK_F32, EJK_DEVICE_CPU, 0, 4, kK, nullptr};
  const ejk_arg twice[] = {{"q", EJK_ARG_TENSOR, &q, {}, 0}, {"k", EJK_ARG_TENSOR, &k, {}, 0},
                           {"v", EJK_ARG_TENSOR, &k, {}, 0}, {"causal", EJK_ARG_BOOL, nullptr, {1, 0}, 0},
                           {"causal", EJK_ARG_BOOL, nullptr, {0, 0}, 0}};
  CHECK(key_of(twice, 5) == EJK_INVALID_ARGUMENT);
  CHECK_THAT(std::string(ejk_last_error()), ContainsSubstring("'causal' is given twice"));
  const ejk_arg tensor_twice[] = {{"q", EJK_ARG_TENSOR, &q, {}, 0}, {"k", EJK_ARG_TENSOR, &k, {}, 0},
                                  {"v", EJK_ARG_TENSOR, &k, {}, 0}, {"k", EJK_ARG_TENSOR, &q, {}, 0}};
  CHECK(key_of(tensor_twice, 4) == EJK_INVALID_ARGUMENT);
  CHECK_THAT(std::string(ejk_last_error()), ContainsSubstring("'k' is given twice"));
  const ejk_arg tune_twice[] = {{"q", EJK_ARG_TENSOR, &q, {}, 0}, {"k", EJK_ARG_TENSOR, &k, {}, 0},
                                {"v", EJK_ARG_TENSOR, &k, {}, 0}, {"block_q", EJK_ARG_TUNE, nullptr, {32, 0}, 0},
                                {"block_q", EJK_ARG_TUNE, nullptr, {64, 0}, 0}};
  CHECK(key_of(tune_twice, 5) == EJK_INVALID_ARGUMENT);
  CHECK_THAT(std::string(ejk_last_error()), ContainsSubstring("'block_q' is given twice"));
}

TEST_CASE("C ABI: an absurd variant count is an invalid argument, not an internal error", "[c-abi][harden]") {
  const ejk_cpu_variant v{"mean_pool_fwd.cpu.avx2.f32", nullptr};
  CHECK(ejk_register_cpu_variants("abi", &v, size_t{1} << 62) == EJK_INVALID_ARGUMENT);
  CHECK_THAT(std::string(ejk_last_error()), ContainsSubstring("ejk_register_cpu_variants: n = 4611686018427387904"));
}

TEST_CASE("C ABI: an output whose rows share memory (stride 0) is refused", "[c-abi][harden]") {
  const int64_t zero_rows[4] = {64 * 2 * 16, 0, 64, 1};
  ejk_tensor q{nullptr, EJK_F32, EJK_DEVICE_CPU, 0, 4, kQ, nullptr}, k{nullptr, EJK_F32, EJK_DEVICE_CPU, 0, 4, kK, nullptr},
      out{nullptr, EJK_F32, EJK_DEVICE_CPU, 0, 4, kQ, zero_rows};
  const ejk_arg args[] = {{"q", EJK_ARG_TENSOR, &q, {}, 0}, {"k", EJK_ARG_TENSOR, &k, {}, 0},
                          {"v", EJK_ARG_TENSOR, &k, {}, 0}, {"out", EJK_ARG_TENSOR, &out, {}, 0}};
  CHECK(key_of(args, 4) == EJK_INVALID_ARGUMENT);
  CHECK_THAT(std::string(ejk_last_error()), ContainsSubstring("out: shape [1, 16, 2, 64] with strides [2048, 0, 64, 1]: an output's elements must not share memory"));
}
