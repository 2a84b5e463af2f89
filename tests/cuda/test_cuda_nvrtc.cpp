// NVRTC compiles of the CUDA variants, with no GPU: every key of the CUDA AOT sets (the flash
// forward's and its bias copy's), plus each feature flag on both targets, must compile for its
// arch, report its resources and neither spill nor serialize its wgmmas; the bias copy runs
// without a stack. Also the small pure functions of the backend (arch spelling, ptxas report
// parsing).
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "cuda/cuda_backend.h"
#include "cuda_test_support.h"
#include "ejk/core/error.h"
#include "ejk/core/variant_key.h"
#include "ejk/kernels/cuda/flash_fwd_traits.cuh"
#include "smoke_spec.h"

namespace ejk::test {
namespace {
using Catch::Matchers::ContainsSubstring;

bool nvrtc_present(std::string* why) { return cuda::NvrtcCompiler::load(why) != nullptr; }

// ptxas's C75xx performance warnings (wgmma serialized: a kernel that checks out but runs at a
// fraction of its speed, bench/cuda/NOTES.md session 12), or "" when the log has none.
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
    VariantKey all = flash_schema().blank_key("cuda", target);
    all.set_enum("dtype", "bf16");
    all.set_int("head_dim", 128), all.set_int("block_q", 128), all.set_int("block_k", 64);
    for (const char* f : {"causal", "window", "segments", "softcap", "sinks", "bias"})
      all.set_flag(f, true);
    keys.push_back(all);
    VariantKey small = flash_schema().blank_key("cuda", target);
    small.set_enum("dtype", "f16");
    small.set_int("head_dim", 64), small.set_int("block_q", 64), small.set_int("block_k", 32);
    small.set_flag("window", true), small.set_flag("sinks", true);
    keys.push_back(small);
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
  for (const Shape& sh : shapes) {
    VariantKey key = flash_schema().blank_key("cuda", "sm90a");
    key.set_enum("dtype", "bf16");
    key.set_int("head_dim", sh.d), key.set_int("block_q", sh.bq), key.set_int("block_k", sh.bk);
    key.set_flag(sh.flag, true);
    keys.push_back(key);
  }
  const std::vector<std::string> failures = compile_keys(keys);
  for (const std::string& f : failures) UNSCOPED_INFO(f);
  CHECK(failures.empty());
}

TEST_CASE("an f32 CUDA key fails with a message naming the dtype", "[nvrtc]") {
  std::string why;
  if (!nvrtc_present(&why)) SKIP("NVRTC unavailable: " + why);
  const std::string src = source_file("templates/flash_fwd.cuda.cu.tmpl");
  cuda::CudaSource s{"f32.cu", src, cuda_kernel_headers()};
  // Render by hand: the spec (rightly) rejects an f32 CUDA key before it reaches the compiler.
  const std::pair<const char*, const char*> vars[] = {
      {"{{banner}}", "// test"}, {"{{key}}", "k"}, {"{{symbol}}", "f32_kernel"},
      {"{{target}}", "sm80"}, {"{{dtype}}", "f32"}, {"{{head_dim}}", "64"},
      {"{{block_q}}", "64"}, {"{{block_k}}", "64"}, {"{{causal}}", "false"},
      {"{{window}}", "false"}, {"{{segments}}", "false"}, {"{{softcap}}", "false"},
      {"{{sinks}}", "false"}, {"{{bias}}", "false"}};
  for (const auto& [k, v] : vars)
    for (size_t at; (at = s.text.find(k)) != std::string::npos;) s.text.replace(at, strlen(k), v);
  try {
    cuda::NvrtcCompiler::get().compile(s, "sm_80", "f32_kernel");
    FAIL("an f32 variant compiled");
  } catch (const CompileError& e) {
    CHECK(std::string(e.what()).find("bf16 or f16") != std::string::npos);
  }
}

TEST_CASE("the cubin's register count agrees with the ptxas report", "[nvrtc]") {
  std::string why;
  if (!nvrtc_present(&why)) SKIP("NVRTC unavailable: " + why);
  VariantKey key = flash_schema().blank_key("cuda", "sm90a");
  key.set_enum("dtype", "bf16");
  key.set_int("head_dim", 64), key.set_int("block_q", 64), key.set_int("block_k", 64);
  key.set_flag("causal", true);
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

// runtime_smoke (bench/cuda) renders the template with its own copy of the variables; each
// flag alone, all of them, and an sm80 key must give the generator's text (core's
// render_variant) but for the banner line.
TEST_CASE("runtime_smoke renders the CUDA template as the generator does", "[cuda]") {
  const std::string tmpl = source_file("templates/flash_fwd.cuda.cu.tmpl");
  using smoke::Spec;
  const Spec base{"sm90a", "bf16", 128, 128, 128};
  std::vector<Spec> specs{base, Spec{"sm80", "f16", 64, 128, 64, true}};
  Spec all = base;
  for (bool Spec::*flag : {&Spec::causal, &Spec::window, &Spec::softcap, &Spec::sinks, &Spec::bias,
                           &Spec::segments, &Spec::per_item}) {
    Spec one = base;
    one.*flag = all.*flag = true;
    specs.push_back(one);
  }
  specs.push_back(all);
  auto body = [](const std::string& text) { return text.substr(text.find('\n')); };
  for (const Spec& s : specs) {
    INFO(s.key());
    const VariantKey key = flash_schema().parse_key(s.key());
    REQUIRE(to_string(key) == s.key());
    CHECK(body(smoke::render(tmpl, s)) == body(render_variant(flash_schema(), key, tmpl, "test")));
  }
}

TEST_CASE("key targets map to NVRTC arch names", "[cuda]") {
  CHECK(cuda::nvrtc_arch("sm80") == "sm_80");
  CHECK(cuda::nvrtc_arch("sm90a") == "sm_90a");
  CHECK_THROWS_AS(cuda::nvrtc_arch("avx512"), InvalidArgument);
  CHECK(cuda::target_for_capability(9, 0) == "sm90a");
  CHECK(cuda::target_for_capability(8, 6) == "sm80");
  CHECK(cuda::target_for_capability(10, 0) == "sm80");
  CHECK_THROWS_AS(cuda::target_for_capability(7, 5), BackendUnavailable);
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

TEST_CASE("launch shapes follow the kernel family of the key", "[cuda]") {
  FlashFwdParams p{};
  p.batch = 3, p.heads_q = 8, p.seqlen_q = 1000;
  const int sms = 132;
  const cuda::LaunchShape a = cuda::flash_fwd_launch_shape("sm80", 128, 128, 64, p, sms);
  CHECK(a.grid[0] == 8);  // ceil(1000 / 128)
  CHECK(a.grid[1] == 8);
  CHECK(a.grid[2] == 3);
  CHECK(a.block == 256);  // one warp per 16 query rows
  CHECK(a.smem_bytes == 2 * (128 + 4 * 64) * (128 + 8));  // padded rows
  CHECK_FALSE(a.tma);
  // sm90a, head_dim a multiple of 64: the wgmma family, a producer warpgroup + one consumer
  // warpgroup per 64 rows; swizzled unpadded tiles (Q, an O tile and 4 stages of K and V
  // here) + alignment + 176 B of mbarriers and the producer's item record. head_dim 128 with
  // room for the O tile: persistent, one block per SM while there are more work items (8 q
  // blocks x 8 heads x 3 sequences).
  const cuda::LaunchShape b = cuda::flash_fwd_launch_shape("sm90a", 128, 128, 64, p, sms);
  CHECK(b.block == 384);
  CHECK(b.smem_bytes == 1024 + 2 * (2 * 128 + 8 * 64) * 128 + 176);
  CHECK(b.tma);
  CHECK(b.grid[0] == 132);
  CHECK(b.grid[1] == 1);
  CHECK(b.grid[2] == 1);
  // 128 x 192 (2 stages, no room for an O tile): one block per work item, a 1-D grid.
  const cuda::LaunchShape w = cuda::flash_fwd_launch_shape("sm90a", 128, 128, 192, p, sms);
  CHECK(w.smem_bytes == 1024 + 2 * (128 + 4 * 192) * 128 + 176);
  CHECK(w.grid[0] == 192);
  CHECK(w.grid[1] == 1);
  // The boundary of the rule: 128 x 160 keeps its O tile beside two stages (persistent),
  // 128 x 176 has no room for it (one block per item, two stages).
  const cuda::LaunchShape b160 = cuda::flash_fwd_launch_shape("sm90a", 128, 128, 160, p, sms);
  CHECK(b160.smem_bytes == 1024 + 2 * (2 * 128 + 4 * 160) * 128 + 176);
  CHECK(b160.grid[0] == 132);
  const cuda::LaunchShape b176 = cuda::flash_fwd_launch_shape("sm90a", 128, 128, 176, p, sms);
  CHECK(b176.smem_bytes == 1024 + 2 * (128 + 4 * 176) * 128 + 176);
  CHECK(b176.grid[0] == 192);
  // head_dim 64 with a block that fills more than half an SM's shared memory (block_q 192,
  // 4 stages of 128 keys, and the O tile): persistent, one block per SM while there are more
  // work items (6 * 8 * 3 = 144) than SMs.
  const cuda::LaunchShape e = cuda::flash_fwd_launch_shape("sm90a", 64, 192, 128, p, sms);
  CHECK(e.block == 512);
  CHECK(e.smem_bytes == 1024 + 2 * (2 * 192 + 8 * 128) * 64 + 176);
  CHECK(e.grid[0] == 132);
  CHECK(e.grid[1] == 1);
  CHECK(e.grid[2] == 1);
  // The same key with `.items` (per_item): one block per work item, no O tile.
  const cuda::LaunchShape ei = cuda::flash_fwd_launch_shape("sm90a", 64, 192, 128, p, sms, true);
  CHECK(ei.block == 512);
  CHECK(ei.smem_bytes == 1024 + 2 * (192 + 8 * 128) * 64 + 176);
  CHECK(ei.grid[0] == 144);
  CHECK(cuda::flash_fwd_smem_bytes("sm90a", 64, 192, 128, true) == ei.smem_bytes);
  CHECK(cuda::flash_fwd_smem_bytes("sm90a", 64, 192, 128, false) == e.smem_bytes);
  // head_dim 64, block_k 64 (4 stages, 82 KiB: two blocks fit an SM): one block per work item.
  const cuda::LaunchShape d = cuda::flash_fwd_launch_shape("sm90a", 64, 128, 64, p, sms);
  CHECK(d.grid[0] == 192);
  CHECK(d.grid[1] == 1);
  CHECK(d.grid[2] == 1);
  // head_dim 256 (2 stages): one block per work item too.
  const cuda::LaunchShape c = cuda::flash_fwd_launch_shape("sm90a", 256, 128, 64, p, sms);
  CHECK(c.smem_bytes == 1024 + 2 * (128 + 4 * 64) * 256 + 176);
  CHECK(c.grid[0] == 192);
  CHECK(c.grid[1] == 1);
  CHECK(c.grid[2] == 1);
  {  // more sequences than gridDim.z allows: the wgmma family's 1-D grid takes them, the sm80
     // family (sequences on gridDim.z) runs slices of at most 65535
    FlashFwdParams many = p;
    many.batch = 70000;
    CHECK(cuda::flash_fwd_launch_shape("sm90a", 128, 128, 192, many, sms).grid[0] == 8 * 8 * 70000);
    CHECK(cuda::flash_fwd_launch_shape("sm90a", 128, 128, 192, many, sms).launches() == 1);
    const cuda::LaunchShape m = cuda::flash_fwd_launch_shape("sm80", 128, 128, 64, many, sms);
    CHECK(m.grid[1] == 8);
    CHECK(m.grid[2] == 65535);
    CHECK(m.launches() == 2);
    // heads past gridDim.y with GQA 7:1: slices of whole groups (9362 * 7 = 65534 heads)
    many.batch = 2, many.heads_q = 70000, many.heads_kv = 10000;
    const cuda::LaunchShape h = cuda::flash_fwd_launch_shape("sm80", 128, 128, 64, many, sms);
    CHECK(h.grid[1] == 65534);
    CHECK(h.grid[2] == 2);
    CHECK(h.launches() == 2);
    CHECK(cuda::flash_fwd_launch_shape("sm80", 128, 128, 64, p, sms).launches() == 1);
  }
  p.batch = 1;  // 48 work items: a persistent grid has one block each
  CHECK(cuda::flash_fwd_launch_shape("sm90a", 64, 192, 128, p, sms).grid[0] == 48);
  CHECK(cuda::flash_fwd_launch_shape("sm90a", 64, 64, 128, p, sms).block == 256);
  // head_dim no multiple of 64: the wgmma family on tiles of the next multiple (d96 as d128,
  // d48 as d64, three consumers too); the sm80 family where block_k < 64
  const cuda::LaunchShape d96 = cuda::flash_fwd_launch_shape("sm90a", 96, 128, 64, p, sms);
  CHECK(d96.tma);
  CHECK(d96.block == 384);
  CHECK(d96.smem_bytes == cuda::flash_fwd_launch_shape("sm90a", 128, 128, 64, p, sms).smem_bytes);
  CHECK(cuda::flash_fwd_launch_shape("sm90a", 160, 128, 64, p, sms).smem_bytes ==
        cuda::flash_fwd_launch_shape("sm90a", 192, 128, 64, p, sms).smem_bytes);
  CHECK(cuda::flash_fwd_launch_shape("sm90a", 48, 128, 64, p, sms).tma);
  CHECK(cuda::flash_fwd_launch_shape("sm90a", 16, 192, 128, p, sms).smem_bytes ==
        cuda::flash_fwd_launch_shape("sm90a", 64, 192, 128, p, sms).smem_bytes);
  CHECK_FALSE(cuda::flash_fwd_launch_shape("sm90a", 48, 128, 32, p, sms).tma);
  CHECK(cuda::flash_fwd_launch_shape("sm90a", 48, 128, 32, p, sms).smem_bytes ==
        2 * (128 + 4 * 32) * (48 + 8));
  CHECK_THROWS_AS(cuda::flash_fwd_launch_shape("sm90a", 96, 192, 128, p, sms), InvalidArgument);
  CHECK_THROWS_AS(cuda::flash_fwd_launch_shape("sm80", 72, 128, 64, p, sms), InvalidArgument);
}

TEST_CASE("an sm80 launch slice sees its heads and sequences only", "[cuda]") {
  // Fake addresses: the slice only moves pointers (2-byte elements, f32 lse and sinks).
  auto addr = [](uintptr_t a) { return reinterpret_cast<void*>(a); };
  FlashFwdParams p{};
  p.q = addr(0x100000), p.k = addr(0x200000), p.v = addr(0x300000), p.out = addr(0x400000);
  p.lse = static_cast<float*>(addr(0x500000));
  p.bias = addr(0x600000);
  p.softmax_aux = static_cast<const float*>(addr(0x700000));
  p.q_segment_ids = static_cast<const i32*>(addr(0x800000));
  p.kv_segment_ids = static_cast<const i32*>(addr(0x900000));
  p.batch = 10, p.heads_q = 12, p.heads_kv = 4, p.num_sinks = 3;
  p.q_stride_b = 1000, p.q_stride_h = 10, p.k_stride_b = 2000, p.k_stride_h = 20;
  p.v_stride_b = 3000, p.v_stride_h = 30, p.o_stride_b = 4000, p.o_stride_h = 40;
  p.lse_stride_b = 500, p.lse_stride_h = 50, p.bias_stride_b = 600, p.bias_stride_h = 60;
  p.q_seg_stride_b = 70, p.kv_seg_stride_b = 80;
  auto bytes = [](const void* a, const void* b) {
    return static_cast<const char*>(a) - static_cast<const char*>(b);
  };
  // heads 6..8 (kv head 2), sequences 4..8
  const FlashFwdParams s = cuda::flash_fwd_slice(p, 6, 3, 4, 5);
  CHECK(s.heads_q == 3);
  CHECK(s.heads_kv == 1);
  CHECK(s.batch == 5);
  CHECK(bytes(s.q, p.q) == 2 * (6 * 10 + 4 * 1000));
  CHECK(bytes(s.k, p.k) == 2 * (2 * 20 + 4 * 2000));
  CHECK(bytes(s.v, p.v) == 2 * (2 * 30 + 4 * 3000));
  CHECK(bytes(s.out, p.out) == 2 * (6 * 40 + 4 * 4000));
  CHECK(s.lse - p.lse == 6 * 50 + 4 * 500);
  CHECK(bytes(s.bias, p.bias) == 2 * (6 * 60 + 4 * 600));
  CHECK(s.softmax_aux - p.softmax_aux == 6 * 3);
  CHECK(s.q_segment_ids - p.q_segment_ids == 4 * 70);
  CHECK(s.kv_segment_ids - p.kv_segment_ids == 4 * 80);
  // varlen: the packed tensors stay put (their rows come from cu_seqlens, absolute offsets)
  const i32 cu_q[11] = {}, cu_k[11] = {};
  p.cu_seqlens_q = cu_q, p.cu_seqlens_k = cu_k;
  const FlashFwdParams v = cuda::flash_fwd_slice(p, 6, 3, 4, 5);
  CHECK(v.cu_seqlens_q == cu_q + 4);
  CHECK(v.cu_seqlens_k == cu_k + 4);
  CHECK(bytes(v.q, p.q) == 2 * 6 * 10);
  CHECK(bytes(v.k, p.k) == 2 * 2 * 20);
  CHECK(bytes(v.out, p.out) == 2 * 6 * 40);
  CHECK(v.lse - p.lse == 6 * 50);
  CHECK(bytes(v.bias, p.bias) == 2 * (6 * 60 + 4 * 600));
  // absent optional tensors stay absent
  p.bias = nullptr, p.softmax_aux = nullptr, p.q_segment_ids = nullptr, p.kv_segment_ids = nullptr;
  const FlashFwdParams n = cuda::flash_fwd_slice(p, 6, 3, 4, 5);
  CHECK(n.bias == nullptr);
  CHECK(n.softmax_aux == nullptr);
  CHECK(n.q_segment_ids == nullptr);
  CHECK(n.kv_segment_ids == nullptr);
}

TEST_CASE("the kernels read a bias as it is only where its pairs or chunks of keys are aligned", "[cuda]") {
  FlashFwdParams p{};
  CHECK(cuda::bias_reads_in_place(p, false));  // no bias
  CHECK(cuda::bias_reads_in_place(p, true));
  p.bias = reinterpret_cast<void*>(uintptr_t(0x600000));
  p.seqlen_k = 512, p.bias_stride_q = 512, p.bias_stride_h = 512 * 512, p.bias_stride_b = 0;
  CHECK(cuda::bias_reads_in_place(p, false));
  CHECK(cuda::bias_reads_in_place(p, true));
  SECTION("an odd key extent: pairs would read the last key's pair past the row; chunks stop at it") {
    p.seqlen_k = 777, p.bias_stride_q = 784;
    CHECK_FALSE(cuda::bias_reads_in_place(p, false));
    CHECK(cuda::bias_reads_in_place(p, true));
  }
  SECTION("an odd row, head or batch stride") {
    p.bias_stride_q = 513;
    CHECK_FALSE(cuda::bias_reads_in_place(p, false));
    CHECK_FALSE(cuda::bias_reads_in_place(p, true));
    p.bias_stride_q = 512, p.bias_stride_h = 3;
    CHECK_FALSE(cuda::bias_reads_in_place(p, false));
    p.bias_stride_h = 0, p.bias_stride_b = 1;
    CHECK_FALSE(cuda::bias_reads_in_place(p, false));
  }
  SECTION("even strides that are no multiple of 8: pairs only") {
    p.seqlen_k = 514, p.bias_stride_q = 514, p.bias_stride_h = 514 * 512;
    CHECK(cuda::bias_reads_in_place(p, false));
    CHECK_FALSE(cuda::bias_reads_in_place(p, true));
  }
  SECTION("a base 2 bytes past a 4-byte boundary, or 4 bytes past a 16-byte one") {
    p.bias = reinterpret_cast<void*>(uintptr_t(0x600002));
    CHECK_FALSE(cuda::bias_reads_in_place(p, false));
    p.bias = reinterpret_cast<void*>(uintptr_t(0x600004));
    CHECK(cuda::bias_reads_in_place(p, false));
    CHECK_FALSE(cuda::bias_reads_in_place(p, true));
  }
  SECTION("varlen (kernel tests only): the longest sequence's keys count, not the packed total") {
    const i32 cu[2] = {};
    p.cu_seqlens_q = p.cu_seqlens_k = cu;
    p.total_k = 1001, p.seqlen_k = 512;
    CHECK(cuda::bias_reads_in_place(p, false));
    p.seqlen_k = 511;
    CHECK_FALSE(cuda::bias_reads_in_place(p, false));
  }
}

TEST_CASE("sm90a bias keys stage the bias in shared memory where it fits", "[cuda]") {
  // head_dim 64 and 128 at 128 x 128 (and 64 at 192 x 128): the rows fit beside the ring.
  for (auto [d, bq, bk] : {std::array<int64_t, 3>{128, 128, 128}, {64, 128, 128}, {64, 192, 128}}) {
    INFO("d" << d << " bq" << bq << " bk" << bk);
    const cuda::FlashFwdLaunchFacts plain = cuda::flash_fwd_launch_facts(true, d, bq, bk);
    const cuda::FlashFwdLaunchFacts bias = cuda::flash_fwd_launch_facts(true, d, bq, bk, false, true);
    CHECK_FALSE(plain.bias_chunks);
    CHECK(bias.bias_chunks);
    // The boxes start 1 KiB past the barriers, 848 bytes past the item record (the warps' bias
    // barriers sit in that gap).
    CHECK(bias.smem_bytes == plain.smem_bytes + 848 + bq * bk * 2);
    CHECK(bias.smem_bytes <= cuda::kMaxSmemSm90);
  }
  // head_dim 256: no room; the kernel reads pairs from global memory, the launch is unchanged.
  const cuda::FlashFwdLaunchFacts d256 = cuda::flash_fwd_launch_facts(true, 256, 128, 80, false, true);
  CHECK_FALSE(d256.bias_chunks);
  CHECK(d256.smem_bytes == cuda::flash_fwd_launch_facts(true, 256, 128, 80).smem_bytes);
  // sm80 keys read pairs.
  CHECK_FALSE(cuda::flash_fwd_launch_facts(false, 128, 128, 64, false, true).bias_chunks);
}

TEST_CASE("a staged bias's tensor map drops broadcast axes and boxes one warp's rows", "[cuda]") {
  FlashFwdParams p{};
  p.bias = reinterpret_cast<void*>(uintptr_t(0x600000));
  p.batch = 3, p.heads_q = 5, p.seqlen_q = 700, p.seqlen_k = 777;
  p.bias_stride_q = 784, p.bias_stride_h = 700 * 784, p.bias_stride_b = 5 * 700 * 784;
  using cuda::FlashTensor;
  const cuda::FlashFwdSm90Geometry g{128, 128, 128};
  SECTION("a full bias: every axis, 16-row boxes, byte strides") {
    const cuda::TmaTensorView v = cuda::flash_fwd_tma_view(p, FlashTensor::bias, g);
    CHECK(v.base == p.bias);
    CHECK(std::vector<u64>(v.dims, v.dims + 4) == std::vector<u64>{777, 700, 5, 3});
    CHECK(std::vector<u64>(v.strides, v.strides + 3) ==
          std::vector<u64>{2 * 784, 2 * 700 * 784, 2 * 5 * 700 * 784});
    CHECK(std::vector<u32>(v.box, v.box + 4) == std::vector<u32>{64, 16, 1, 1});
  }
  SECTION("broadcast rows, heads and batch: size 1, a legal stride, 1-row boxes") {
    p.bias_stride_q = p.bias_stride_h = p.bias_stride_b = 0;
    const cuda::TmaTensorView v = cuda::flash_fwd_tma_view(p, FlashTensor::bias, g);
    CHECK(std::vector<u64>(v.dims, v.dims + 4) == std::vector<u64>{777, 1, 1, 1});
    CHECK(std::vector<u64>(v.strides, v.strides + 3) == std::vector<u64>{16, 16, 16});
    CHECK(std::vector<u32>(v.box, v.box + 4) == std::vector<u32>{64, 1, 1, 1});
  }
  SECTION("the bias map is encoded only for a key that stages it, with a bias") {
    CHECK(cuda::flash_fwd_tensors(p, true).size == 5);
    CHECK(cuda::flash_fwd_tensors(p, false).size == 4);
    p.bias = nullptr;
    CHECK(cuda::flash_fwd_tensors(p, true).size == 4);
  }
}

}  // namespace
}  // namespace ejk::test
