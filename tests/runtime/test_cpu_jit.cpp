// CPU JIT: clang in-process -> object bytes -> LLJIT -> call, checked against a float64
// reference; diagnostics, identity, symbol isolation and the cache round trip.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "cache/disk_cache.h"
#include "cache/get_or_build.h"
#include "cache/payload_check.h"
#include "ejk/core/error.h"
#include "jit/cpu_compiler.h"
#include "jit/cpu_loader.h"
#include "attention_reference.h"
#include "test_support.h"
#include "util/hash.h"

using Catch::Matchers::ContainsSubstring;
using ejk::jit::CpuCompiler;
using ejk::jit::CpuLoader;
using ejk::jit::CpuSource;
using ejk::test::params_for;
using ejk::test::Problem;
using ejk::test::random_problem;
using ejk::test::reference_errors;

namespace {

using Clock = std::chrono::steady_clock;
using KernelFn = void (*)(const void* params, long long task_begin, long long task_end);

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// CPU time of this thread: unlike wall time it does not grow when the machine is busy.
double thread_cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The real shared kernel headers plus the sample kernel, as the runtime would pass them.
std::vector<std::pair<std::string, std::string>> sample_headers() {
  std::string common = std::string(EJK_KERNELS_DIR) + "/ejk/kernels/common/";
  return {{"ejk/kernels/common/base.h", read_text(common + "base.h")},
          {"ejk/kernels/common/mask.h", read_text(common + "mask.h")},
          {"ejk/kernels/common/flash_params.h", read_text(common + "flash_params.h")},
          {"ejk/kernels/common/philox.h", read_text(common + "philox.h")},
          {"jit_sample_attention.h", read_text(EJK_TEST_KERNEL)}};
}

struct SampleVariant {
  int head_dim, block_q, block_k;
  bool causal;
  std::string symbol() const {
    return "ejk_test_attention_d" + std::to_string(head_dim) + "_bq" + std::to_string(block_q) +
           "_bk" + std::to_string(block_k) + (causal ? "_causal" : "");
  }
};

CpuSource sample_source(const SampleVariant& v) {
  CpuSource src;
  src.name = v.symbol() + ".cpp";
  src.text = "#include \"jit_sample_attention.h\"\n"
             "namespace {\n"
             "using Config = ejk::jit_sample::Config<" + std::to_string(v.head_dim) + ", " +
             std::to_string(v.block_q) + ", " + std::to_string(v.block_k) + ", " +
             (v.causal ? "true" : "false") + ">;\n"
             "}\n"
             "extern \"C\" void " + v.symbol() +
             "(const void* params, long long task_begin, long long task_end) {\n"
             "  ejk::jit_sample::attention_tasks<Config>(\n"
             "      *static_cast<const ejk::FlashFwdParams*>(params), task_begin, task_end);\n"
             "}\n";
  src.headers = sample_headers();
  return src;
}

}  // namespace

TEST_CASE("identity names the clang version, the triple and the host CPU", "[cpu_jit]") {
  REQUIRE(CpuCompiler::available());
  const CpuCompiler& c = CpuCompiler::instance();
  CHECK_THAT(c.identity(), ContainsSubstring("clang version 19"));
  CHECK_FALSE(c.host_cpu().empty());
  CHECK_THAT(c.identity(), ContainsSubstring("cpu=" + c.host_cpu()));
  CHECK_THAT(c.identity(), ContainsSubstring("triple=" + c.target_triple()));
  CHECK_THAT(c.identity(), ContainsSubstring("-O3"));
  REQUIRE_FALSE(c.host_features().empty());
  for (const auto& f : c.host_features()) CHECK((f[0] == '+' || f[0] == '-'));
  CHECK_THAT(c.identity(), ContainsSubstring(c.host_features().front()));
}

TEST_CASE("a JIT-compiled attention kernel matches float64, with timings", "[cpu_jit]") {
  uint64_t seed = ejk::test::fresh_seed();
  std::mt19937_64 rng(seed);
  CAPTURE(seed);
  SampleVariant causal{64, 16, 32, true}, plain{64, 16, 32, false};

  auto t = Clock::now();
  const CpuCompiler& compiler = CpuCompiler::instance();
  double compiler_init_ms = ms_since(t);
  t = Clock::now();
  double cpu0 = thread_cpu_ms();
  std::vector<uint8_t> causal_obj = compiler.compile(sample_source(causal));
  double cold_compile_ms = ms_since(t), cold_compile_cpu_ms = thread_cpu_ms() - cpu0;
  t = Clock::now();
  std::vector<uint8_t> plain_obj = compiler.compile(sample_source(plain));
  double warm_compile_ms = ms_since(t);

  ejk::test::TempDir dir;
  ejk::cache::DiskCache cache(dir.path() / "v1");
  std::string hash = ejk::test::random_hex(rng, 32);
  cache.store("cpu", plain.symbol(), hash, plain_obj);

  t = Clock::now();
  CpuLoader& loader = CpuLoader::instance();
  double loader_init_ms = ms_since(t);
  t = Clock::now();
  auto causal_fn = reinterpret_cast<KernelFn>(loader.load(causal_obj, causal.symbol()));
  double first_load_ms = ms_since(t);
  // A cache hit as the runtime sees it: read and verify the entry, link it, look it up.
  t = Clock::now();
  auto cached = cache.load("cpu", plain.symbol(), hash);
  REQUIRE(cached.has_value());
  auto plain_fn = reinterpret_cast<KernelFn>(loader.load(*cached, plain.symbol()));
  double cache_hit_load_ms = ms_since(t);

  std::printf("[cpu_jit timing] host cpu %s; compiler init %.1f ms; cold compile %.1f ms (%.1f ms CPU); "
              "warm compile %.1f ms; object %zu bytes; LLJIT init %.1f ms; first load %.2f ms; "
              "cache-hit load (disk read + verify + link + lookup) %.2f ms\n",
              compiler.host_cpu().c_str(), compiler_init_ms, cold_compile_ms, cold_compile_cpu_ms,
              warm_compile_ms,
              causal_obj.size(), loader_init_ms, first_load_ms, cache_hit_load_ms);

  // Plain scopes, not SECTIONs: a rerun would compile again and time memoized loads.
  {
    INFO("causal");
    Problem pr = random_problem(rng, causal.head_dim);
    ejk::FlashFwdParams p = params_for(pr, true);
    causal_fn(&p, 0, ejk::flash_fwd_num_tasks(p, causal.block_q));
    auto [out_err, lse_err] = reference_errors(pr, p);
    CAPTURE(pr.seq_q, pr.seq_k, out_err, lse_err);
    CHECK(out_err <= 1e-5);
    CHECK(lse_err <= 1e-5);
  }
  {
    INFO("sliding window, tasks split in two calls");
    Problem pr = random_problem(rng, plain.head_dim);
    ejk::FlashFwdParams p = params_for(pr, false);
    p.mask.window_left = static_cast<int64_t>(rng() % 12);
    p.mask.window_right = static_cast<int64_t>(rng() % 12);
    int64_t tasks = ejk::flash_fwd_num_tasks(p, plain.block_q);
    int64_t split = static_cast<int64_t>(rng() % tasks);
    plain_fn(&p, 0, split);
    plain_fn(&p, split, tasks);
    auto [out_err, lse_err] = reference_errors(pr, p);
    CAPTURE(pr.seq_q, pr.seq_k, p.mask.window_left, p.mask.window_right, split, out_err, lse_err);
    CHECK(out_err <= 1e-5);
    CHECK(lse_err <= 1e-5);
  }
}

TEST_CASE("a syntax error is a CompileError carrying clang's diagnostic", "[cpu_jit]") {
  CpuSource src;
  src.name = "broken_variant.cpp";
  src.text = "extern \"C\" int ejk_broken() { return 1 }\n";
  CHECK_THROWS_AS(CpuCompiler::instance().compile(src), ejk::CompileError);
  CHECK_THROWS_WITH(CpuCompiler::instance().compile(src),
                    ContainsSubstring("broken_variant.cpp:1:") &&
                        ContainsSubstring("expected ';'"));
}

TEST_CASE("headers come only from the CpuSource and clang's builtin headers", "[cpu_jit]") {
  CpuSource src;
  src.name = "includes.cpp";
  SECTION("a system header is not found") {
    src.text = "#include <stdio.h>\n";
    CHECK_THROWS_WITH(CpuCompiler::instance().compile(src), ContainsSubstring("not found"));
  }
  SECTION("a header missing from the list is not found") {
    src.text = "#include \"ejk/kernels/common/base.h\"\n";
    CHECK_THROWS_WITH(CpuCompiler::instance().compile(src),
                      ContainsSubstring("'ejk/kernels/common/base.h' file not found"));
  }
  SECTION("a header escaping the include root is rejected") {
    src.text = "int x;\n";
    src.headers = {{"../outside.h", "int y;\n"}};
    CHECK_THROWS_AS(CpuCompiler::instance().compile(src), ejk::InvalidArgument);
  }
  SECTION("builtin intrinsics headers are available") {
    src.text = "#include <immintrin.h>\n"
               "extern \"C\" float ejk_sum4(const float* x) {\n"
               "  __m128 v = _mm_loadu_ps(x);\n"
               "  v = _mm_add_ps(v, _mm_movehl_ps(v, v));\n"
               "  return _mm_cvtss_f32(_mm_add_ss(v, _mm_shuffle_ps(v, v, 1)));\n"
               "}\n";
    auto object = CpuCompiler::instance().compile(src);
    auto fn = reinterpret_cast<float (*)(const float*)>(
        CpuLoader::instance().load(object, "ejk_sum4"));
    std::mt19937_64 rng(ejk::test::fresh_seed());
    std::normal_distribution<float> normal;
    float x[4] = {normal(rng), normal(rng), normal(rng), normal(rng)};
    double want = double(x[0]) + x[1] + x[2] + x[3];
    CHECK(std::abs(fn(x) - want) <= 1e-5 * (1 + std::abs(want)));
  }
}

TEST_CASE("kernels compile without exceptions and without math errno", "[cpu_jit]") {
  CpuSource src;
  src.name = "throws.cpp";
  src.text = "extern \"C\" void ejk_throws() { throw 1; }\n";
  CHECK_THROWS_WITH(CpuCompiler::instance().compile(src), ContainsSubstring("exceptions disabled"));

  // With errno semantics sqrtf would keep a call to the library for negative inputs.
  src.name = "sqrt.cpp";
  src.text = "extern \"C\" float ejk_sqrt(float x) { return __builtin_sqrtf(x); }\n";
  auto object = CpuCompiler::instance().compile(src);
  std::string bytes(object.begin(), object.end());
  CHECK(bytes.find("sqrtf") == std::string::npos);
}

TEST_CASE("march selects the ISA a variant is compiled for", "[cpu_jit]") {
  CpuSource src;
  src.name = "isa.cpp";
  src.text = "extern \"C\" int ejk_isa() {\n"
             "#if defined(__AVX512F__)\n  return 512;\n"
             "#elif defined(__AVX2__)\n  return 256;\n"
             "#else\n  return 128;\n#endif\n}\n";
  const CpuCompiler& compiler = CpuCompiler::instance();
  auto isa_of = [&](const std::string& march) {
    src.march = march;
    auto object = compiler.compile(src);  // ejk_isa only returns a constant: safe on any host
    return reinterpret_cast<int (*)()>(CpuLoader::instance().load(object, "ejk_isa"))();
  };
  CHECK(isa_of("x86-64") == 128);
  CHECK(isa_of("x86-64-v3") == 256);
  CHECK(isa_of("x86-64-v4") == 512);
  const auto& features = compiler.host_features();
  bool host_avx512 = std::find(features.begin(), features.end(), "+avx512f") != features.end();
  bool host_avx2 = std::find(features.begin(), features.end(), "+avx2") != features.end();
  CHECK(isa_of("") == (host_avx512 ? 512 : host_avx2 ? 256 : 128));

  CHECK(compiler.identity_for_march("") == compiler.identity());
  CHECK_THAT(compiler.identity_for_march("x86-64-v3"), ContainsSubstring("march=x86-64-v3"));
  src.march = "not-a-cpu";
  CHECK_THROWS_WITH(compiler.compile(src), ContainsSubstring("not-a-cpu"));
}

namespace {

CpuSource value_source(long long value) {
  CpuSource src;
  src.name = "value.cpp";
  src.text = "extern \"C\" long long ejk_test_value() { return " + std::to_string(value) + "LL; }\n";
  return src;
}

}  // namespace

TEST_CASE("objects defining the same symbol load side by side", "[cpu_jit]") {
  std::mt19937_64 rng(ejk::test::fresh_seed());
  long long a = static_cast<long long>(rng() >> 2), b = a + 1 + static_cast<long long>(rng() % 1000);
  auto obj_a = CpuCompiler::instance().compile(value_source(a));
  auto obj_b = CpuCompiler::instance().compile(value_source(b));
  CpuLoader& loader = CpuLoader::instance();
  auto fn_a = reinterpret_cast<long long (*)()>(loader.load(obj_a, "ejk_test_value"));
  auto fn_b = reinterpret_cast<long long (*)()>(loader.load(obj_b, "ejk_test_value"));
  CHECK(fn_a() == a);
  CHECK(fn_b() == b);
  // The same bytes again are not linked twice.
  CHECK(loader.load(obj_a, "ejk_test_value") == reinterpret_cast<void*>(fn_a));
}

TEST_CASE("the same source compiles to the same bytes", "[cpu_jit]") {
  // Cache entries are content-addressed by their inputs; that is only sound if compiling is a
  // function of them.
  std::mt19937_64 rng(ejk::test::fresh_seed());
  CpuSource src = value_source(static_cast<long long>(rng() >> 1));
  CHECK(CpuCompiler::instance().compile(src) == CpuCompiler::instance().compile(src));
}

TEST_CASE("load failures name the symbol", "[cpu_jit]") {
  CpuLoader& loader = CpuLoader::instance();
  SECTION("missing symbol") {
    auto object = CpuCompiler::instance().compile(value_source(7));
    CHECK_THROWS_WITH(loader.load(object, "ejk_no_such_symbol"),
                      ContainsSubstring("ejk_no_such_symbol"));
  }
  SECTION("static constructors") {
    CpuSource src;
    src.name = "ctor.cpp";
    src.text = "extern \"C\" int ejk_external();\n"
               "int ejk_global = ejk_external();\n"
               "extern \"C\" int ejk_get() { return ejk_global; }\n";
    auto object = CpuCompiler::instance().compile(src);
    CHECK_THROWS_WITH(loader.load(object, "ejk_get"), ContainsSubstring("static constructors"));
  }
  SECTION("bytes that are not an object") {
    std::mt19937_64 rng(ejk::test::fresh_seed());
    auto junk = ejk::test::random_bytes(rng, 256);
    CHECK_THROWS_AS(loader.load(junk, "ejk_get"), ejk::CompileError);
  }
}

TEST_CASE("two threads compile at once", "[cpu_jit]") {
  std::mt19937_64 rng(ejk::test::fresh_seed());
  long long values[2] = {static_cast<long long>(rng() >> 3), static_cast<long long>(rng() >> 3)};
  std::vector<uint8_t> objects[2];
  std::thread workers[2];
  for (int i = 0; i < 2; ++i)
    workers[i] = std::thread([&, i] { objects[i] = CpuCompiler::instance().compile(value_source(values[i])); });
  for (auto& w : workers) w.join();
  for (int i = 0; i < 2; ++i) {
    auto fn = reinterpret_cast<long long (*)()>(CpuLoader::instance().load(objects[i], "ejk_test_value"));
    CHECK(fn() == values[i]);
  }
}

TEST_CASE("get_or_build with the CPU compiler: jit first, cache after", "[cpu_jit][get_or_build]") {
  uint64_t seed = ejk::test::fresh_seed();
  std::mt19937_64 rng(seed);
  CAPTURE(seed);
  SampleVariant variant{32, 8, 16, true};
  CpuSource src = sample_source(variant);
  std::vector<std::string_view> parts = {CpuCompiler::instance().identity(), src.name, src.text};
  for (const auto& [path, text] : src.headers) parts.insert(parts.end(), {path, text});
  std::string hash = ejk::util::hash_strings_hex(parts);

  ejk::test::TempDir dir;
  ejk::cache::DiskCache cache(dir.path() / "v1");
  auto build = [&] { return CpuCompiler::instance().compile(src); };
  // The check the runtime runs on every hit: real JIT output must pass it.
  const std::string symbol = variant.symbol();
  auto check = [&](std::span<const uint8_t> b) { return ejk::cache::check_payload("cpu", symbol, b); };
  auto first = ejk::cache::get_or_build(cache, "cpu", variant.symbol(), hash, build, check);
  auto second = ejk::cache::get_or_build(cache, "cpu", variant.symbol(), hash, build, check);
  CHECK(first.source == ejk::cache::Source::Jit);
  CHECK(second.source == ejk::cache::Source::Cache);
  CHECK(first.bytes == second.bytes);
  CHECK(ejk::cache::check_payload("cpu", symbol, first.bytes) == std::nullopt);

  auto fn = reinterpret_cast<KernelFn>(CpuLoader::instance().load(second.bytes, variant.symbol()));
  Problem pr = random_problem(rng, variant.head_dim);
  ejk::FlashFwdParams p = params_for(pr, true);
  fn(&p, 0, ejk::flash_fwd_num_tasks(p, variant.block_q));
  auto [out_err, lse_err] = reference_errors(pr, p);
  CAPTURE(out_err, lse_err);
  CHECK(out_err <= 1e-5);
  CHECK(lse_err <= 1e-5);
}
