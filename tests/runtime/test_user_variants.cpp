// A program's own CPU variants (ejk_generate_kernels; ejk_register_cpu_variants): found as
// built-in variants once the program has loaded, and every kind of bad registration refused
// with a message naming the key. Runs with EJK_DISABLE_JIT=1 (tests/runtime/CMakeLists.txt).
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cmath>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <string>

#include "ejk/admin.h"
#include "ejk/ejk.h"
#include "ejk/ops/flash_attention.h"

using Catch::Matchers::ContainsSubstring;

namespace {

void never_called(const void*, long long, long long) {}

ejk::Tensor random_f32(ejk::Dims shape, uint32_t seed) {
  ejk::Tensor t = ejk::Tensor::empty(shape, ejk::DType::f32);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = nd(rng);
  return t;
}

// The kernel ABI the generated registration passed: the right one for this build.
std::string kernel_abi() {
  std::ifstream in(EJK_TEST_REGISTRATION);
  std::stringstream text;
  text << in.rdbuf();
  std::smatch m;
  const std::string s = text.str();
  REQUIRE(std::regex_search(s, m, std::regex(R"re(ejk_register_cpu_variants\("([^"]+)")re")));
  return m[1];
}

// Registers one entry; returns the error message ("" when accepted).
std::string register_one(const std::string& abi, const char* key, void (*fn)(const void*, long long, long long)) {
  const ejk_cpu_variant v{key, fn};
  return ejk_register_cpu_variants(abi.c_str(), &v, 1) == EJK_OK ? "" : ejk_last_error();
}

std::string some_builtin_cpu_key() {
  for (const ejk::OpListing& op : ejk::list_ops())
    for (const std::string& key : op.builtin)
      if (key.find(".cpu.") != std::string::npos) return key;
  FAIL("the library has no built-in CPU variant");
  return {};
}

}  // namespace

TEST_CASE("a program's variant runs as a built-in one", "[user_variants]") {
  const int64_t B = 1, S = 100, H = 2, D = 88;  // S <= 256: the heuristic picks bq64.bk64
  ejk::Tensor q = random_f32({B, S, H, D}, 1), k = random_f32({B, S, H, D}, 2), v = random_f32({B, S, H, D}, 3);
  const ejk::FlashAttentionInputs in{q.view(), k.view(), v.view()};
  ejk::FlashAttentionOptions opt;
  opt.causal = false;
  const ejk::FlashAttentionResult r = ejk::flash_attention(in, opt);
  CHECK_THAT(r.info.key, ContainsSubstring(".f32.d88.bq64.bk64"));
  CHECK(r.info.source == ejk::VariantSource::aot);
  const ejk::FlashAttentionReference ref = ejk::flash_attention_reference(in, opt);
  double err = 0;
  for (size_t i = 0; i < ref.out.size(); ++i) err = std::fmax(err, std::fabs(r.out.data_as<float>()[i] - ref.out[i]));
  CHECK(err < 1e-4);
}

TEST_CASE("registration refuses what it cannot trust, naming each key", "[user_variants]") {
  const std::string abi = kernel_abi();
  CHECK_THAT(register_one("0.1.0-0000000000000000", "flash_fwd.cpu.generic.f32.d96.bq64.bk64", never_called),
             ContainsSubstring("rebuild the program against this installation"));
  CHECK_THAT(register_one(abi, "flash_fwd.cpu.avx2.f32.d88.bq64.bk64", never_called),
             ContainsSubstring("'flash_fwd.cpu.avx2.f32.d88.bq64.bk64': registered already"));
  const std::string builtin = some_builtin_cpu_key();
  CHECK_THAT(register_one(abi, builtin.c_str(), never_called), ContainsSubstring("built into libejk already"));
  CHECK_THAT(register_one(abi, "flash_fwd.cpu.avx2.f32.d81.bq64.bk64", never_called), ContainsSubstring("head_dim = 81"));
  CHECK_THAT(register_one(abi, "flash_fwd.cuda.sm80.bf16.d96.bq128.bk64", never_called),
             ContainsSubstring("not a CPU key"));
  CHECK_THAT(register_one(abi, "no_such_op.cpu.avx2", never_called), ContainsSubstring("no_such_op"));
  CHECK_THAT(register_one(abi, "flash_fwd.cpu.avx2.f32.d96.bq64.bk64", nullptr), ContainsSubstring("no function"));
  CHECK(ejk_register_cpu_variants(abi.c_str(), nullptr, 1) == EJK_INVALID_ARGUMENT);
  CHECK(ejk_register_cpu_variants(nullptr, nullptr, 0) == EJK_INVALID_ARGUMENT);
}

TEST_CASE("registration keeps the good entries of a table with bad ones", "[user_variants]") {
  const std::string abi = kernel_abi();
  const ejk_cpu_variant table[] = {{"flash_fwd.cpu.generic.f32.d104.bq64.bk64", never_called},
                                   {"flash_fwd.cpu.generic.f32.d7.bq64.bk64", never_called}};
  REQUIRE(ejk_register_cpu_variants(abi.c_str(), table, 2) == EJK_INVALID_ARGUMENT);
  CHECK_THAT(ejk_last_error(), ContainsSubstring("head_dim = 7"));
  CHECK_THAT(std::string(ejk_last_error()), !ContainsSubstring("d104"));
  CHECK_THAT(register_one(abi, table[0].key, never_called), ContainsSubstring("registered already"));
}
