// NVRTC compiles of the CUDA variants, with no GPU: every key of the CUDA AOT sets (the flash
// forward's and its bias copy's), plus each feature flag on both targets, must compile for its
// arch, report its resources and neither spill nor serialize its wgmmas; the bias copy runs
// without a stack. Also the small pure functions of the backend (arch spelling, ptxas report
// parsing, cubin resources) and what the specs give the engine for CUDA (targets, companions).
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <atomic>
#include <map>
#include <thread>
#include <vector>

#include "cuda_test_support.h"
#include "ejk/core/error.h"
#include "ejk/core/render.h"
#include "ejk/core/variant_key.h"
#include "ops/flash_attention/flash_op.h"

namespace ejk::test {
namespace {
using Catch::Matchers::ContainsSubstring;

bool nvrtc_present(std::string* why) { return cuda::NvrtcCompiler::load(why) != nullptr; }

// ptxas's C75xx performance warnings (wgmma serialized: a kernel that checks out but runs at a
// fraction of its speed), or "" when the log has none.
std::string serialization_warning(const std::string& log) {
  const size_t at = log.find("(C75");
  if (at == std::string::npos) return "";
  const size_t begin = log.rfind('\n', at) + 1, end = log.find('\n', at);
  return log.substr(begin, std::min<size_t>(end - begin, 160));
}

// The bias copy (flash_fwd_bias_rows.cuh) runs without a stack: a 64-bit division in its row
// walk once compiled to a subroutine that doubled ptxas's time. "" when so, or for other ops.
std::string bias_rows_problem(const VariantKey& key, const cuda::KernelResources& r) {
  if (key.op != bias_rows_schema().op() || r.stack_bytes == 0) return "";
  return std::to_string(r.stack_bytes) + " bytes of stack";
}

// Compiles keys on all cores (NVRTC is thread-safe per program); returns one line per failure.
std::vector<std::string> compile_keys(const std::vector<VariantKey>& keys) {
  const cuda::NvrtcCompiler& nv = cuda::NvrtcCompiler::get();
  std::vector<std::string> failures(keys.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next++) < keys.size();) {
      const VariantKey& key = keys[i];
      try {
        const cuda::CubinResult r =
            nv.compile(cuda_source(key), cuda::nvrtc_arch(key.target), symbol_name(key));
        if (r.cubin.empty()) failures[i] = to_string(key) + ": empty cubin";
        else if (r.resources.registers <= 0) failures[i] = to_string(key) + ": no register count in the cubin";
        else if (r.resources.spill_store_bytes > 64)
          failures[i] = to_string(key) + ": spills " + std::to_string(r.resources.spill_store_bytes) + " bytes";
        else if (const std::string w = serialization_warning(r.log); !w.empty())
          failures[i] = to_string(key) + ": " + w;
        else if (const std::string b = bias_rows_problem(key, r.resources); !b.empty())
          failures[i] = to_string(key) + ": " + b;
      } catch (const std::exception& e) {
        failures[i] = to_string(key) + ": " + e.what();
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < std::max(1u, std::thread::hardware_concurrency()); ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  std::vector<std::string> out;
  for (auto& f : failures)
    if (!f.empty()) out.push_back(f);
  return out;
}

TEST_CASE("every CUDA AOT variant compiles under NVRTC for its arch", "[nvrtc]") {
  std::string why;
  if (!nvrtc_present(&why)) SKIP("NVRTC unavailable: " + why);
  std::vector<VariantKey> keys = flash_schema().aot_keys("cuda");
  REQUIRE(keys.size() >= 8);
  const std::vector<VariantKey> copies = bias_rows_schema().aot_keys("cuda");
  CHECK(copies.size() == 2);  // one bias copy per target
  keys.insert(keys.end(), copies.begin(), copies.end());
  for (const std::string target : {"sm80", "sm90a"}) {
    auto has = [&](const std::vector<VariantKey>& set) {
      return std::any_of(set.begin(), set.end(), [&](const VariantKey& k) { return k.target == target; });
    };
    CHECK(has(keys));
    CHECK(has(copies));
  }
  const std::vector<std::string> failures = compile_keys(keys);
  for (const std::string& f : failures) UNSCOPED_INFO(f);
  CHECK(failures.empty());
}

TEST_CASE("each feature flag compiles on sm80 and sm90a", "[nvrtc]") {
  std::string why;
  if (!nvrtc_present(&why)) SKIP("NVRTC unavailable: " + why);
  std::vector<VariantKey> keys;
  for (const char* target : {"sm80", "sm90a"}) {
    keys.push_back(cuda_key(target, "bf16", 128, 128, 64, {"causal", "window", "segments", "softcap", "sinks", "bias"}));
    keys.push_back(cuda_key(target, "f16", 64, 64, 32, {"window", "sinks"}));
  }
  const std::vector<std::string> failures = compile_keys(keys);
  for (const std::string& f : failures) UNSCOPED_INFO(f);
  CHECK(failures.empty());
}

// head_dims that are no multiple of 64 run the wgmma family on padded tiles (tile_head_dim); most
// are JIT-only keys, so the AOT compile test does not reach them.
TEST_CASE("padded head_dims compile for sm90a's wgmma family", "[nvrtc]") {
  std::string why;
  if (!nvrtc_present(&why)) SKIP("NVRTC unavailable: " + why);
  struct Shape { int d, bq, bk; const char* flag; };
  // Below 64 the TMA box is wider than the tensor: d32 and d48, three consumers at d16.
  const Shape shapes[] = {{80, 128, 128, "causal"}, {112, 128, 128, "softcap"},
                          {160, 128, 112, "causal"}, {224, 128, 80, "per_item"},
                          {32, 128, 128, "causal"},  {48, 128, 128, "sinks"},
                          {16, 192, 128, "window"}};
  std::vector<VariantKey> keys;
  for (const Shape& sh : shapes) keys.push_back(cuda_key("sm90a", "bf16", sh.d, sh.bq, sh.bk, {sh.flag}));
  const std::vector<std::string> failures = compile_keys(keys);
  for (const std::string& f : failures) UNSCOPED_INFO(f);
  CHECK(failures.empty());
}

TEST_CASE("an f32 CUDA key fails with a message naming the dtype", "[nvrtc]") {
  std::string why;
  if (!nvrtc_present(&why)) SKIP("NVRTC unavailable: " + why);
  // The spec (rightly) rejects an f32 CUDA key before it reaches the compiler: render a valid
  // key's variables with the dtype swapped, through core's renderer (a template variable the map
  // lacks is an error naming it, not a source NVRTC fails on for another reason).
  std::map<std::string, std::string> vars = flash_schema().template_vars(cuda_key("sm80", "bf16", 64, 64, 64));
  vars["dtype"] = "f32", vars["symbol"] = "f32_kernel", vars["banner"] = "// test";
  const cuda::CudaSource s{"f32.cu",
                           render_template(source_file("templates/flash_fwd.cuda.cu.tmpl"), vars,
                                           "templates/flash_fwd.cuda.cu.tmpl"),
                           cuda_kernel_headers()};
  try {
    cuda::NvrtcCompiler::get().compile(s, "sm_80", "f32_kernel");
    FAIL("an f32 variant compiled");
  } catch (const CompileError& e) {
    CHECK_THAT(e.what(), ContainsSubstring("bf16 or f16"));
  }
}

TEST_CASE("the cubin's register count agrees with the ptxas report", "[nvrtc]") {
  std::string why;
  if (!nvrtc_present(&why)) SKIP("NVRTC unavailable: " + why);
  const VariantKey key = cuda_key("sm90a", "bf16", 64, 64, 64, {"causal"});
  const cuda::CubinResult r = cuda::NvrtcCompiler::get().compile(cuda_source(key), "sm_90a", symbol_name(key));
  const cuda::KernelResources log = cuda::parse_ptxas_report(r.log, symbol_name(key));
  if (log.registers < 0) SKIP("NVRTC put no ptxas report in this log");
  CHECK(r.resources.registers == log.registers);
  CHECK(cuda::cubin_resources(r.cubin, symbol_name(key)).stack_bytes == log.stack_bytes);
  CHECK(cuda::cubin_resources(r.cubin, "absent_symbol").registers == -1);
  CHECK_THROWS_AS(cuda::cubin_resources({1, 2, 3}, "x"), InvalidArgument);
  // The flash kernels take their tiles at launch (dynamic); what the cubin holds is the 1 KiB
  // sm_90 reserves in every block. A static array shows on sm_80.
  CHECK(r.resources.static_smem_bytes == 1024);
  const cuda::CudaSource tiny{"tiny.cu",
                              "extern \"C\" __global__ void tiny(float* x) {\n"
                              "  __shared__ float t[256];\n"
                              "  t[threadIdx.x] = x[threadIdx.x];\n"
                              "  __syncthreads();\n"
                              "  x[threadIdx.x] = t[255 - threadIdx.x];\n"
                              "}\n",
                              {}};
  const cuda::CubinResult t = cuda::NvrtcCompiler::get().compile(tiny, "sm_80", "tiny");
  CHECK(t.resources.static_smem_bytes == 1024);
}

TEST_CASE("key targets map to NVRTC arch names", "[cuda]") {
  CHECK(cuda::nvrtc_arch("sm80") == "sm_80");
  CHECK(cuda::nvrtc_arch("sm90a") == "sm_90a");
  CHECK_THROWS_AS(cuda::nvrtc_arch("avx512"), InvalidArgument);
}

// The engine runs a spec's first CUDA target whose `requires` the device meets (engine/keys.h
// target_for: `sm_80` is compute capability 8.0 or newer, `sm_90a` exactly 9.0). The sm90a
// cubins (wgmma and setmaxnreg: arch-specific code) load on 9.0 only, so both ops must ask for
// exactly that, ahead of sm80: a 9.0 device gets sm90a, 8.x and 10.0 get sm80. On a GPU, "the
// engine picks the CUDA target this device runs" checks the pick itself.
TEST_CASE("each CUDA target requires the devices its cubins load on", "[cuda]") {
  for (const OpSchema* schema : {&flash_schema(), &bias_rows_schema()}) {
    INFO(schema->file());
    const std::vector<TargetDef>& targets = schema->backend("cuda").targets;
    REQUIRE(targets.size() == 2);
    CHECK(targets[0].name == "sm90a");
    CHECK(targets[0].requires_features == std::vector<std::string>{"sm_90a"});
    CHECK(targets[1].name == "sm80");
    CHECK(targets[1].requires_features == std::vector<std::string>{"sm_80"});
    for (const TargetDef& t : targets) {
      INFO(t.name);
      CHECK(t.compile_flags == std::vector<std::string>{"-arch=" + cuda::nvrtc_arch(t.name)});
    }
  }
}

// A bias key's plan carries the bias copy as its one companion (kernel 1 of its launches): the
// b16 copy of the key's own target, a key of the copy's AOT set (built in, never a JIT on the
// first bias that needs it). Other keys have none.
TEST_CASE("a bias key's companion is its target's bias copy from the AOT set", "[cuda]") {
  const ops::FlashAttentionOp& op = ops::flash_attention_op();
  const std::vector<VariantKey> aot = bias_rows_schema().aot_keys("cuda");
  for (const char* target : {"sm80", "sm90a"})
    for (const char* dtype : {"bf16", "f16"}) {
      const VariantKey key = cuda_key(target, dtype, 128, 128, 64, {"causal", "bias"});
      INFO(to_string(key));
      const std::vector<VariantKey> companions = op.companions(key);
      REQUIRE(companions.size() == 1);
      CHECK(to_string(companions[0]) == std::string("flash_fwd_bias_rows.cuda.") + target + ".b16");
      CHECK(std::count(aot.begin(), aot.end(), companions[0]) == 1);
      CHECK(op.companions(cuda_key(target, dtype, 128, 128, 64, {"causal"})).empty());
    }
  VariantKey cpu = flash_schema().blank_key("cpu", "avx512");
  cpu.set_enum("dtype", "bf16"), cpu.set_int("head_dim", 64), cpu.set_int("block_q", 64), cpu.set_int("block_k", 64);
  cpu.set_flag("bias", true);
  CHECK(op.companions(cpu).empty());
}

TEST_CASE("the ptxas report is read per entry function", "[cuda]") {
  const std::string log =
      "ptxas info    : Compiling entry function 'first' for 'sm_90a'\n"
      "ptxas info    : Function properties for first\n"
      "    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 200 registers, used 1 barriers, 1024 bytes smem, 688 bytes cmem[0]\n"
      "ptxas info    : Compiling entry function 'second' for 'sm_90a'\n"
      "ptxas info    : Function properties for second\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 96 registers, used 1 barriers, 688 bytes cmem[0]\n";
  const cuda::KernelResources a = cuda::parse_ptxas_report(log, "first");
  CHECK(a.registers == 200);
  CHECK(a.stack_bytes == 8);
  CHECK(a.spill_store_bytes == 4);
  CHECK(a.spill_load_bytes == 12);
  CHECK(a.static_smem_bytes == 1024);
  const cuda::KernelResources b = cuda::parse_ptxas_report(log, "second");
  CHECK(b.registers == 96);
  CHECK(b.static_smem_bytes == 0);
  CHECK(cuda::parse_ptxas_report(log, "absent").registers == -1);
}

}  // namespace
}  // namespace ejk::test
