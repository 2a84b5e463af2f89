// The production CPU kernel (kernels/ejk/kernels/cpu/flash_fwd.h) through the CPU JIT: the
// real template and headers, cold-compile and load timings, and a float64 check of f32
// variants. Its own executable so "cold" means the first compile of a fresh process.
#include <time.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <catch2/catch_test_macros.hpp>

#include "attention_reference.h"
#include "jit/cpu_compiler.h"
#include "jit/cpu_loader.h"
#include "test_support.h"

namespace fs = std::filesystem;
using ejk::jit::CpuCompiler;
using ejk::jit::CpuLoader;
using ejk::jit::CpuSource;

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

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Every header of the common and cpu kernel directories, keyed as kernels include them.
std::vector<std::pair<std::string, std::string>> kernel_headers() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const char* sub : {"common", "cpu"}) {
    fs::path dir = fs::path(EJK_KERNELS_DIR) / "ejk" / "kernels" / sub;
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.path().extension() == ".h")
        out.emplace_back("ejk/kernels/" + std::string(sub) + "/" +
                             entry.path().filename().string(),
                         read_text(entry.path()));
  }
  return out;
}

struct FlashVariant {
  std::string dtype;  // ElemKind enumerator: f32, bf16, f16
  int head_dim, block_q, block_k;
  bool causal, window;
  std::string symbol() const {
    return "ejk_test_flash_" + dtype + "_d" + std::to_string(head_dim) +
           (causal ? "_causal" : "") + (window ? "_win" : "");
  }
};

// {{name}} substitution of the production template; a placeholder this test does not know
// is left in the text and fails the compile with clang's message.
std::string render(const FlashVariant& v) {
  auto flag = [](bool b) { return std::string(b ? "true" : "false"); };
  std::map<std::string, std::string> vars = {
      {"banner", "// Rendered by test_cpu_jit_flash."},
      {"dtype", v.dtype},
      {"head_dim", std::to_string(v.head_dim)},
      {"block_q", std::to_string(v.block_q)},
      {"block_k", std::to_string(v.block_k)},
      {"causal", flag(v.causal)},
      {"window", flag(v.window)},
      {"segments", "false"},
      {"softcap", "false"},
      {"sinks", "false"},
      {"bias", "false"},
      {"dropout", "false"},
      {"dmask", "false"},
      {"symbol", v.symbol()}};
  std::string text = read_text(fs::path(EJK_TEMPLATES_DIR) / "flash_fwd.cpu.cpp.tmpl");
  for (const auto& [name, value] : vars) {
    std::string placeholder = "{{" + name + "}}";
    for (size_t at = text.find(placeholder); at != std::string::npos;
         at = text.find(placeholder, at + value.size()))
      text.replace(at, placeholder.size(), value);
  }
  return text;
}

CpuSource flash_source(const FlashVariant& v) {
  return {v.symbol() + ".cpp", render(v), kernel_headers()};
}

}  // namespace

TEST_CASE("the production CPU flash kernel JIT-compiles, loads and matches float64",
          "[cpu_jit][flash]") {
  if (!fs::exists(fs::path(EJK_KERNELS_DIR) / "ejk/kernels/cpu/flash_fwd.h"))
    SKIP("kernels/ejk/kernels/cpu/flash_fwd.h is not there yet");
  uint64_t seed = ejk::test::fresh_seed();
  std::mt19937_64 rng(seed);
  CAPTURE(seed);
  FlashVariant causal{"f32", 128, 64, 64, true, false};
  FlashVariant window{"f32", 64, 64, 64, false, true};
  FlashVariant bf16{"bf16", 128, 64, 64, true, false};
  CpuSource causal_src = flash_source(causal);
  size_t lines = std::count(causal_src.text.begin(), causal_src.text.end(), '\n');
  for (const auto& [path, text] : causal_src.headers)
    lines += std::count(text.begin(), text.end(), '\n');

  const CpuCompiler& compiler = CpuCompiler::instance();
  auto t = Clock::now();
  double cpu0 = thread_cpu_ms();
  auto causal_obj = compiler.compile(causal_src);
  double cold_ms = ms_since(t), cold_cpu_ms = thread_cpu_ms() - cpu0;
  t = Clock::now();
  auto window_obj = compiler.compile(flash_source(window));
  double warm_ms = ms_since(t);
  t = Clock::now();
  auto bf16_obj = compiler.compile(flash_source(bf16));
  double bf16_ms = ms_since(t);

  CpuLoader& loader = CpuLoader::instance();
  t = Clock::now();
  auto causal_fn = reinterpret_cast<KernelFn>(loader.load(causal_obj, causal.symbol()));
  double first_load_ms = ms_since(t);
  t = Clock::now();
  auto window_fn = reinterpret_cast<KernelFn>(loader.load(window_obj, window.symbol()));
  double load_ms = ms_since(t);
  REQUIRE(loader.load(bf16_obj, bf16.symbol()) != nullptr);

  std::printf("[cpu_jit flash timing] %zu source lines; cold compile f32 d128 causal %.1f ms "
              "(%.1f ms CPU); "
              "f32 d64 window %.1f ms; bf16 d128 causal %.1f ms; objects %zu/%zu/%zu bytes; "
              "first load (with LLJIT start) %.2f ms; next load %.2f ms\n",
              lines, cold_ms, cold_cpu_ms, warm_ms, bf16_ms, causal_obj.size(), window_obj.size(),
              bf16_obj.size(), first_load_ms, load_ms);

  {
    INFO("f32 causal");
    auto pr = ejk::test::random_problem(rng, causal.head_dim);
    auto p = ejk::test::params_for(pr, true);
    causal_fn(&p, 0, ejk::flash_fwd_num_tasks(p, causal.block_q));
    auto [out_err, lse_err] = ejk::test::reference_errors(pr, p);
    CAPTURE(pr.seq_q, pr.seq_k, out_err, lse_err);
    CHECK(out_err <= 1e-5);
    CHECK(lse_err <= 1e-5);
  }
  {
    INFO("f32 sliding window");
    auto pr = ejk::test::random_problem(rng, window.head_dim);
    auto p = ejk::test::params_for(pr, false);
    p.mask.window_left = static_cast<int64_t>(rng() % 20);
    p.mask.window_right = static_cast<int64_t>(rng() % 20);
    window_fn(&p, 0, ejk::flash_fwd_num_tasks(p, window.block_q));
    auto [out_err, lse_err] = ejk::test::reference_errors(pr, p);
    CAPTURE(pr.seq_q, pr.seq_k, p.mask.window_left, p.mask.window_right, out_err, lse_err);
    CHECK(out_err <= 1e-5);
    CHECK(lse_err <= 1e-5);
  }
}
