// End to end through the `ejk` binary: JIT of a variant outside the AOT set, the disk cache
// across processes, concurrent compiles, EJK_DISABLE_JIT, corrupt entries, --save/--load.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <vector>

#include "ejk/kernels/cuda/flash_fwd_traits.cuh"

namespace fs = std::filesystem;
using Catch::Matchers::ContainsSubstring;

#include "cli_shell.h"

namespace {

using ejk::test::Proc;

Proc sh(const std::string& cmd) { return ejk::test::shell(cmd); }

// A fresh cache directory per test, removed afterwards.
struct TempCache {
  fs::path dir;
  TempCache() {
    dir = fs::temp_directory_path() / fmt::format("ejk-cli-test-{}-{}", getpid(), counter()++);
    fs::remove_all(dir);
  }
  ~TempCache() { fs::remove_all(dir); }
  std::string env() const { return "EJK_CACHE_DIR=" + dir.string(); }
  static int& counter() { static int c = 0; return c; }
};

const std::string kEjk = EJK_CLI_PATH;
// head_dim 80 is outside the default AOT set: it must come from the JIT or the cache.
const std::string kJitArgs = "run flash_attention --b 1 --sq 67 --sk 67 --hq 2 --hkv 2 --d 80 --causal --iters 1 --check --json";

nlohmann::json run_json(const std::string& env, const std::string& args) {
  Proc p = sh(env + " " + kEjk + " " + args);
  INFO(p.out);
  REQUIRE(p.status == 0);
  return nlohmann::json::parse(p.out.substr(p.out.find('{')));
}

std::vector<fs::path> cache_files(const fs::path& dir) {
  std::vector<fs::path> files;
  if (!fs::exists(dir)) return files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".bin") files.push_back(e.path());
  return files;
}

}  // namespace

TEST_CASE("a head_dim outside the AOT set compiles once; a second process loads it from disk", "[cli][jit][cache]") {
  TempCache cache;
  auto first = run_json(cache.env(), kJitArgs);
  CHECK(first["source"] == "jit");
  CHECK(first["check"] == "pass");
  CHECK(first["compile_ms"].get<double>() > 0);
  CHECK_THAT(first["key"].get<std::string>(), ContainsSubstring(".d80."));
  auto second = run_json(cache.env(), kJitArgs);
  CHECK(second["source"] == "cache");
  CHECK(second["key"] == first["key"]);
  CHECK(second["check"] == "pass");
}

TEST_CASE("8 processes JIT the same missing key at once: all succeed, one compiles", "[cli][jit][cache][concurrency]") {
  TempCache cache;
  std::vector<std::future<Proc>> procs;
  for (int i = 0; i < 8; ++i)
    procs.push_back(std::async(std::launch::async, [&] { return sh(cache.env() + " " + kEjk + " " + kJitArgs); }));
  int jit = 0, cached = 0;
  for (auto& f : procs) {
    Proc p = f.get();
    INFO(p.out);
    REQUIRE(p.status == 0);
    auto j = nlohmann::json::parse(p.out.substr(p.out.find('{')));
    CHECK(j["check"] == "pass");
    jit += j["source"] == "jit";
    cached += j["source"] == "cache";
  }
  CHECK(jit == 1);
  CHECK(cached == 7);
}

TEST_CASE("a flipped byte and a truncated entry are detected and rebuilt", "[cli][cache][corruption]") {
  TempCache cache;
  run_json(cache.env(), kJitArgs);
  auto files = cache_files(cache.dir);
  REQUIRE(files.size() == 1);
  SECTION("flipped byte") {
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(fs::file_size(files[0]) / 2));
    char c;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(static_cast<std::streamoff>(fs::file_size(files[0]) / 2));
    f.write(&c, 1);
  }
  SECTION("truncated") { fs::resize_file(files[0], fs::file_size(files[0]) / 3); }
  Proc verify = sh(cache.env() + " " + kEjk + " cache verify");
  CHECK(verify.status == 1);
  CHECK_THAT(verify.out, ContainsSubstring("CORRUPT"));
  auto again = run_json(cache.env(), kJitArgs);
  CHECK(again["source"] == "jit");  // rebuilt, never executed
  CHECK(again["check"] == "pass");
  CHECK(sh(cache.env() + " " + kEjk + " cache verify").status == 0);
}

TEST_CASE("EJK_DISABLE_JIT=1 turns a miss into an error naming the key", "[cli][jit]") {
  TempCache cache;
  Proc p = sh(cache.env() + " EJK_DISABLE_JIT=1 " + kEjk + " " + kJitArgs);
  CHECK(p.status != 0);
  CHECK_THAT(p.out, ContainsSubstring("flash_fwd.cpu.") && ContainsSubstring(".d80.") &&
                        ContainsSubstring("EJK_DISABLE_JIT"));
}

TEST_CASE("save writes every argument as npy; load reproduces the run", "[cli][npy]") {
  TempCache cache;
  fs::path dir = cache.dir / "saved";
  std::string args = "run flash_attention --b 2 --sq 33 --sk 41 --hq 4 --hkv 2 --d 64 --dtype bf16 --causal "
                     "--window 8,2 --softcap 30 --sinks --segments --bias --iters 1 --check --json --save " + dir.string();
  auto saved = run_json(cache.env(), args);
  CHECK(saved["check"] == "pass");
  // Segment ids run a variant compiled with them.
  CHECK_THAT(saved["key"].get<std::string>(), ContainsSubstring(".causal.win.seg.cap.sink.bias"));
  for (const char* f : {"q", "k", "v", "bias", "q_segment_ids", "kv_segment_ids", "softmax_aux", "out", "lse"})
    CHECK(fs::exists(dir / (std::string(f) + ".npy")));
  CHECK(fs::exists(dir / "params.json"));
  auto loaded = run_json(cache.env(), "run flash_attention --iters 1 --check --json --load " + dir.string());
  CHECK(loaded["key"] == saved["key"]);
  CHECK(loaded["check"] == "pass");
  CHECK(loaded["rel_l2_err"] == saved["rel_l2_err"]);
}

TEST_CASE("ejk compile reports the registers and shared memory a CUDA variant launches with", "[cli][cuda]") {
  TempCache cache;
  struct Case {
    std::string args;
    bool sm90a;
    int64_t d, bq, bk;
  };
  // An AOT key of the wgmma family, and an NVRTC compile (head_dim 80: not built in) of the
  // mma.sync family; neither needs a GPU.
  for (const Case& c : {Case{"--arch sm_90a --d 128 --causal --block-q 128 --block-k 128", true, 128, 128, 128},
                        Case{"--arch sm_80 --d 80 --block-q 128 --block-k 64", false, 80, 128, 64}}) {
    Proc p = sh(cache.env() + " " + kEjk + " compile flash_attention --backend cuda " + c.args + " --json");
    if (p.status != 0 && p.out.find("no CUDA backend") != std::string::npos) SKIP(p.out);
    INFO(p.out);
    REQUIRE(p.status == 0);
    auto j = nlohmann::json::parse(p.out.substr(p.out.find('{')));
    CHECK(j["registers"].get<int>() > 0);
    const int64_t smem = ejk::cuda::flash_fwd_launch_facts(c.sm90a, c.d, c.bq, c.bk).smem_bytes;
    CHECK(smem > 48 * 1024);  // both tiles need the opt-in shared memory
    // sm_90 reserves 1 KiB of every block's shared memory (a static section of the cubin).
    CHECK(j["shared_bytes"].get<int64_t>() == smem + (c.sm90a ? 1024 : 0));
  }
}
