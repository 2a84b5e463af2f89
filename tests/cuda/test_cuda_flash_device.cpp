// The CUDA flash forward on a GPU through the library's own launch path (spec key -> rendered
// template -> NVRTC -> cuModuleLoadData -> ops::launch_flash_fwd -> engine::CudaLaunchContext),
// against the float64 reference (device_case.h). SKIPs with the reason without a driver/GPU.
// Fresh random inputs every run (the seed is printed); outputs are poisoned with NaN first.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <iterator>

#include "device_case.h"
#include "ejk/core/error.h"
#include "ejk/kernels/cuda/flash_fwd_traits.cuh"

namespace ejk::test {
namespace {

// `batch` packed sequences of lengths drawn from `len` (queries and keys apart).
void pack(check::Problem& pr, int64_t batch, std::uniform_int_distribution<int>& len, std::mt19937_64& rng) {
  pr.varlen = true, pr.batch = batch;
  pr.cu_q = {0}, pr.cu_k = {0};
  pr.seqlen_q = pr.seqlen_k = 0;
  for (int64_t b = 0; b < batch; ++b) {
    pr.cu_q.push_back(pr.cu_q.back() + len(rng)), pr.cu_k.push_back(pr.cu_k.back() + len(rng));
    pr.seqlen_q = std::max<int64_t>(pr.seqlen_q, pr.cu_q[b + 1] - pr.cu_q[b]);
    pr.seqlen_k = std::max<int64_t>(pr.seqlen_k, pr.cu_k[b + 1] - pr.cu_k[b]);
  }
}

Outcome run_case(const VariantKey& key, const check::Problem& pr, std::mt19937_64& rng, const cuda::DeviceInfo& dev,
                 CaseOptions opt = {}) {
  const engine::PlanData plan = flash_plan(key);
  DeviceCase c(key, pr, rng, opt);
  c.launch(plan, dev, dev.sm_count);
  return c.outcome();
}

// The engine's choice for this device: sm90a only where its arch-specific code runs (9.0),
// sm80 on every other device from 8.0.
TEST_CASE("the engine picks the CUDA target this device runs", "[device]") {
  const cuda::DeviceInfo& dev = device_or_skip();
  INFO(dev.name << ", compute capability " << dev.major << "." << dev.minor);
  CHECK(device_target() == (dev.major == 9 && dev.minor == 0 ? "sm90a" : "sm80"));
}

TEST_CASE("CUDA flash forward matches the float64 reference on random problems", "[device]") {
  const cuda::DeviceInfo& dev = device_or_skip();
  const std::string& target = device_target();
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed << ", device " << dev.name << ", target " << target);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> len(1, 260), win(0, 80);
  // 96, 160, 32 and 48: padded tiles on sm90a (head_dim up to a multiple of 64); 128 x 64 x 32
  // the sm80 family there.
  const int configs[][3] = {{64, 128, 64}, {128, 128, 128}, {128, 64, 32}, {96, 64, 64},
                            {256, 128, 64}, {64, 192, 128}, {160, 128, 64}, {32, 128, 128},
                            {48, 192, 64}};
  constexpr int kConfigs = int(std::size(configs));
  for (int i = 0; i < 2 * kConfigs; ++i) {
    const auto& c = configs[i % kConfigs];
    if (c[1] == 192 && target != "sm90a") continue;  // three consumer warpgroups: sm90a only
    VariantKey key = cuda_key(target, rng() & 1 ? "bf16" : "f16", c[0], c[1], c[2]);
    for (const char* f : {"causal", "window", "softcap", "sinks", "bias"}) key.set_flag(f, rng() % 2 == 0);
    key.set_flag("segments", i % 4 == 1);
    // The schedule flag where the key may take it: every other wgmma-family key runs per item.
    key.set_flag("per_item", target == "sm90a" && cuda::flash_fwd_uses_wgmma(true, c[0], c[1], c[2]) && i % 2 == 1);
    flash_schema().validate(key);
    check::Problem pr;
    pr.batch = 2, pr.heads_q = 4, pr.heads_kv = rng() & 1 ? 1 : 2;
    pr.seqlen_q = len(rng), pr.seqlen_k = len(rng);
    pr.window_left = win(rng), pr.window_right = win(rng), pr.cap = 8.f, pr.num_sinks = 2;
    pr.normalize = i % 3 != 2;
    // Biases broadcast over heads or over query rows (stride 0; sm90a stages the latter in
    // 1-row boxes).
    pr.bias_bcast_h = i % 2 == 0, pr.bias_bcast_q = i % 3 == 0;
    if (i % 4 == 3) {  // packed sequences (no segment ids: i % 4 == 1 has them)
      pack(pr, 3, len, rng);
      pr.bias_bcast_b = true;
    }
    // Every fifth case shares its sinks over the heads (the seed's 1-D softmax_aux).
    const CaseOptions opt{.shared_sinks = i % 5 == 4};
    INFO(to_string(key) << " Sq=" << pr.seqlen_q << " Sk=" << pr.seqlen_k << (pr.varlen ? " varlen" : "")
                        << (opt.shared_sinks ? " shared sinks" : ""));
    EJK_CHECK_OUTCOME(run_case(key, pr, rng, dev, opt));
  }
}

// The seed's 1-D softmax_aux [num_sinks] is shared by every head (sinks_stride_h = 0). Past the
// shared values the device buffer holds decoys that would swamp a row's softmax: a kernel that
// read sinks per head would miss the bound by far. Both families, GQA, dense and packed.
TEST_CASE("a 1-D softmax_aux is shared by every head", "[device]") {
  const cuda::DeviceInfo& dev = device_or_skip();
  const std::string& target = device_target();
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed << ", device " << dev.name << ", target " << target);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> len(1, 200);
  std::vector<VariantKey> keys = {cuda_key(target, "bf16", 128, 128, 64, {"causal", "sinks"}),
                                  cuda_key(target, "f16", 64, 64, 32, {"sinks"})};
  if (target == "sm90a") {
    keys.push_back(cuda_key(target, "bf16", 128, 128, 128, {"causal", "sinks"}));
    keys.push_back(cuda_key(target, "f16", 64, 192, 128, {"window", "softcap", "sinks"}));
  }
  for (const VariantKey& key : keys)
    for (bool varlen : {false, true}) {
      check::Problem pr;
      pr.batch = 2, pr.heads_q = 6, pr.heads_kv = 2, pr.num_sinks = 3;
      pr.seqlen_q = len(rng), pr.seqlen_k = len(rng);
      pr.window_left = 40, pr.window_right = 7, pr.cap = 8.f;
      if (varlen) pack(pr, 3, len, rng);
      INFO(to_string(key) << " Sq=" << pr.seqlen_q << " Sk=" << pr.seqlen_k << (varlen ? " varlen" : ""));
      EJK_CHECK_OUTCOME(run_case(key, pr, rng, dev, {.shared_sinks = true}));
    }
}

// The sm80 family puts q heads on gridDim.y and sequences on gridDim.z (at most 65535 each) and
// runs larger problems as launches over slices (flash_fwd_slice): 70,000 sequences dense (their
// bias per sequence) and packed (cu_seqlens offset per slice), and 70,000 q heads of GQA 7:1
// (k/v sliced by whole groups; bias and sinks per head). Sequences of 1-2 keep it small.
TEST_CASE("the sm80 family's slices past 65535 heads or sequences", "[device]") {
  const cuda::DeviceInfo& dev = device_or_skip();
  const std::string& target = device_target();
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed << ", device " << dev.name << ", target " << target);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> len(1, 2);
  // block_k 32: the sm80 family on either target.
  const VariantKey plain = cuda_key(target, "bf16", 64, 64, 32, {"causal"});
  const VariantKey extras = cuda_key(target, "f16", 64, 64, 32, {"sinks", "bias"});
  struct Slicing {
    const char* what;
    const VariantKey& key;
    check::Problem pr;
  };
  std::vector<Slicing> cases;
  {
    check::Problem pr;
    pr.batch = 70000, pr.seqlen_q = 2, pr.seqlen_k = 2, pr.num_sinks = 1;
    cases.push_back({"70000 dense sequences", extras, pr});
  }
  {
    check::Problem pr;
    pack(pr, 70000, len, rng);
    cases.push_back({"70000 packed sequences", plain, pr});
  }
  {
    check::Problem pr;
    pr.batch = 2, pr.heads_q = 70000, pr.heads_kv = 10000, pr.seqlen_q = 1, pr.seqlen_k = 2;
    pr.num_sinks = 1, pr.bias_bcast_b = true;
    cases.push_back({"70000 q heads over 10000 kv heads", extras, pr});
  }
  for (const Slicing& s : cases) {
    INFO(s.what << ": " << to_string(s.key));
    const engine::PlanData plan = flash_plan(s.key);
    DeviceCase c(s.key, s.pr, rng);
    const ops::FlashLaunchShape shape = c.shape(plan, dev.sm_count);
    REQUIRE_FALSE(shape.tma);
    REQUIRE(shape.launches() >= 2);
    c.launch(plan, dev, dev.sm_count);
    EJK_CHECK_OUTCOME(c.outcome());
  }
}

// Persistent causal blocks with item records draw their items from the stream's counter (the
// workspace's; sm90/schedule.cuh, sm90::Drawn), which every launch leaves zero.
// Launches back to back on one stream must each find it zero, and launches in flight on two
// streams must not share one: an item drawn by the other launch would be missing here (NaN
// from the poison).
TEST_CASE("drawn work items: back to back on one stream and at once on two", "[device]") {
  const cuda::DeviceInfo& dev = device_or_skip();
  const std::string& target = device_target();
  if (target != "sm90a") SKIP("drawn items are an sm90a kernel feature; device target " + target);
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed << ", device " << dev.name);
  std::mt19937_64 rng(seed);
  const VariantKey key = cuda_key(target, "bf16", 128, 128, 128, {"causal"});  // persistent, item records
  INFO(to_string(key));
  const engine::PlanData plan = flash_plan(key);
  check::Problem pr;
  pr.batch = 2, pr.heads_q = 4, pr.heads_kv = 2, pr.seqlen_q = pr.seqlen_k = 700, pr.normalize = true;
  // 6 q blocks x 4 heads x 2 sequences = 48 items on grids of 5 and 3: every block draws ~10-16.
  DeviceCase a(key, pr, rng), b(key, pr, rng);
  REQUIRE(a.shape(plan, 5).grid[0] == 5);
  const cuda::CudaDriver& d = cuda::CudaDriver::get();
  // The counters are zero after the launches that drew from them.
  auto counters_zero = [&](cuda::CUstream stream) {
    const uint32_t* c = engine::stream_workspace(dev.ordinal, stream).counters();
    REQUIRE(c != nullptr);  // null would launch the static order: nothing drawn
    const std::vector<uint32_t> h = to_host<uint32_t>(reinterpret_cast<cuda::CUdeviceptr>(c), 2);
    return h[0] == 0 && h[1] == 0;
  };
  for (int round = 0; round < 3; ++round) {  // the legacy stream: each launch after the last
    a.launch(plan, dev, 5);
    EJK_CHECK_OUTCOME(a.outcome());
    CHECK(counters_zero(nullptr));
  }
  cuda::CUstream s1 = nullptr, s2 = nullptr;
  d.check(d.cuStreamCreate(&s1, 1), "cuStreamCreate");  // 1: CU_STREAM_NON_BLOCKING
  d.check(d.cuStreamCreate(&s2, 1), "cuStreamCreate");
  for (int round = 0; round < 3; ++round) {
    a.launch(plan, dev, 5, s1);
    b.launch(plan, dev, 3, s2);
    d.check(d.cuStreamSynchronize(s1), "cuStreamSynchronize");
    d.check(d.cuStreamSynchronize(s2), "cuStreamSynchronize");
    for (const DeviceCase* c : {&a, &b}) EJK_CHECK_OUTCOME(c->outcome());
    CHECK(counters_zero(s1));
    CHECK(counters_zero(s2));
  }
  CHECK(engine::stream_workspace(dev.ordinal, s1).counters() != engine::stream_workspace(dev.ordinal, s2).counters());
  d.check(d.cuStreamDestroy(s1), "cuStreamDestroy");
  d.check(d.cuStreamDestroy(s2), "cuStreamDestroy");
}

// A bias 2 bytes past a 4-byte boundary with an odd key count reads in place in neither family:
// the launcher copies it into the stream's scratch with the plan's companion first. Results
// against the reference, on each family the device runs (pairs; sm90a's staged chunks).
TEST_CASE("a bias no kernel reads in place is copied first, by the plan's companion", "[device]") {
  const cuda::DeviceInfo& dev = device_or_skip();
  const std::string& target = device_target();
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed << ", device " << dev.name << ", target " << target);
  std::mt19937_64 rng(seed);
  std::vector<VariantKey> keys = {cuda_key(target, "bf16", 64, 64, 32, {"bias"}),
                                  cuda_key(target, "f16", 128, 128, 64, {"causal", "bias"})};
  if (target == "sm90a") keys.push_back(cuda_key(target, "bf16", 128, 128, 128, {"bias"}));
  for (const VariantKey& key : keys) {
    INFO(to_string(key));
    const engine::PlanData plan = flash_plan(key);
    REQUIRE(plan.companions.size() == 1);
    for (int layout = 0; layout < 3; ++layout) {
      check::Problem pr;
      pr.batch = 2, pr.heads_q = 4, pr.heads_kv = 2, pr.seqlen_q = 150, pr.seqlen_k = 201;
      pr.bias_bcast_h = layout == 1, pr.bias_bcast_q = layout == 2;
      DeviceCase c(key, pr, rng, {.bias_offset = 1});
      const ops::FlashLaunchShape shape = c.shape(plan, dev.sm_count);
      REQUIRE_FALSE(ops::bias_reads_in_place(c.params(), shape.bias_chunks));
      INFO("layout " << layout << (shape.bias_chunks ? ", staged chunks" : ", pairs"));
      c.launch(plan, dev, dev.sm_count);
      EJK_CHECK_OUTCOME(c.outcome());
    }
  }
}

// The launcher refuses a launch past the device's shared memory (here a device that allows one
// byte less than the key needs) by the kernel's name, before the flash kernel runs: the outputs
// keep their poison.
TEST_CASE("a launch past the device's shared memory is refused by name", "[device]") {
  const cuda::DeviceInfo& dev = device_or_skip();
  const std::string& target = device_target();
  std::mt19937_64 rng(fresh_seed());
  const VariantKey key = cuda_key(target, "bf16", 64, 64, 32, {"bias"});
  const engine::PlanData plan = flash_plan(key);
  check::Problem pr;
  pr.batch = 1, pr.heads_q = pr.heads_kv = 2, pr.seqlen_q = 100, pr.seqlen_k = 77;  // odd Sk: copied
  DeviceCase c(key, pr, rng);
  cuda::DeviceInfo small = dev;
  small.max_smem_optin = int(c.shape(plan, dev.sm_count).smem_bytes) - 1;
  try {
    c.launch(plan, small, dev.sm_count);
    FAIL("launched with more shared memory than the device allows");
  } catch (const InvalidArgument& e) {
    CHECK_THAT(e.what(), Catch::Matchers::ContainsSubstring(symbol_name(key)));
    CHECK_THAT(e.what(), Catch::Matchers::ContainsSubstring("shared memory"));
  }
  CHECK(c.outputs_untouched());
  c.launch(plan, dev, dev.sm_count);  // the same case on the device as it is
  EJK_CHECK_OUTCOME(c.outcome());
}

TEST_CASE("without a driver the backend says why", "[cuda]") {
  std::string why;
  if (cuda::CudaDriver::load(&why) != nullptr) SKIP("a CUDA driver is present on this machine");
  CHECK(why.find("libcuda") != std::string::npos);
  CHECK_THROWS_AS(cuda::use_device(0), BackendUnavailable);
  CHECK_THROWS_AS(device_target(), BackendUnavailable);
}

}  // namespace
}  // namespace ejk::test
