// Bad input through the `ejk` binary gets a clean error: exit status 2 and a message naming the
// option, argument or variable and what was expected; nothing crashes, hangs or allocates first.
// Each row is a reproducer of a defect found by trying the CLI as a careless user would.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "cli_shell.h"

namespace fs = std::filesystem;
using Catch::Matchers::ContainsSubstring;

namespace {

using ejk::test::Proc;

// Runs `cmd` with the environment assignments `env` ("A=1 B=2"), killed after 60 s.
Proc sh(const std::string& env, const std::string& cmd) {
  return ejk::test::shell("env " + env + " timeout 60 " + cmd);
}

const std::string kEjk = EJK_CLI_PATH;

void expect_error(const std::string& env, const std::string& args, const std::string& what) {
  const Proc p = sh(env, kEjk + " " + args);
  INFO("ejk " << args << "\n" << p.out);
  CHECK(p.status == 2);
  CHECK_THAT(p.out, ContainsSubstring(what));
}

}  // namespace

TEST_CASE("malformed options are refused by name", "[cli][errors]") {
  const std::string run = "run flash_attention --b 1 --sq 64 --sk 64 --hq 2 --hkv 2 ";
  expect_error("", run + "--d 64 --dtype u8", "q: expected dtype f32, bf16, f16, got u8");
  expect_error("", run + "--d 64 --dtype u16", "dtype: unknown 'u16'");
  expect_error("", "run flash_attention --b 2147549185 --sq 2147418113 --sk 2147418113 --hq 1 --hkv 1 --d 64",
               "overflow");
  expect_error("", run + "--d 4096", "head_dim = 4096 is outside");
  expect_error("", run + "--d 64 --window 5abc", "--window: expected W or L,R");
  expect_error("", run + "--d 64 --window 1,2,3", "--window: expected W or L,R");
  expect_error("", "run flash_attention --sq ''", "--sq: expected a value, got ''");
  expect_error("", run + "--d 64 --window ''", "--window: expected a value, got ''");
  expect_error("", run + "--d 0100", "--d: expected a decimal integer");
  expect_error("", run + "--d 64 --scale abc", "--scale");
  expect_error("", "run flash_attention --b -2", "--b: expected a decimal integer");
  expect_error("", "run flash_attention --hq 3 --hkv 2", "kv heads (2) must divide the number of q heads (3)");
  expect_error("", run + "--d 64 --softcap -1", "logits_soft_cap: must be > 0, got -1");
  expect_error("", "run mean_pooling --b 2 --t 8 --d 4 --dtype i32", "expected dtype");
  expect_error("", "compile flash_attention --backend cuda --arch sm_75 --d 64", "unknown CUDA target 'sm75'");
  expect_error("", "run flash_atention", "run: unknown op 'flash_atention' (ops: ");
  expect_error("", "run flash_atention", " flash_attention, flash_attention_backward,");
  expect_error("", "run flash_attention --d", "--d");  // a usage error exits 2 too
}

TEST_CASE("environment variables are read strictly", "[cli][errors][env]") {
  const std::string run = "run flash_attention --b 1 --sq 64 --sk 64 --hq 2 --hkv 2 --d 64 --iters 1";
  expect_error("EJK_NUM_THREADS=abc", run, "EJK_NUM_THREADS=\"abc\"");
  expect_error("EJK_NUM_THREADS=-3", run, "EJK_NUM_THREADS=\"-3\"");
  expect_error("EJK_NUM_THREADS=99999999999", run, "EJK_NUM_THREADS=\"99999999999\"");
  expect_error("EJK_DISABLE_JIT=maybe EJK_CACHE_DIR=/nonexistent-ejk-cache",
               "run flash_attention --b 1 --sq 64 --sk 64 --hq 2 --hkv 2 --d 72 --iters 1", "EJK_DISABLE_JIT");
  expect_error("EJK_CPU_TARGET=avx9", run, "EJK_CPU_TARGET=avx9: expected one of");
}

TEST_CASE("a --load folder with wrong content is refused by name", "[cli][errors][load]") {
  const fs::path dir = fs::temp_directory_path() / ("ejk-cli-load-" + std::to_string(getpid()));
  fs::create_directories(dir);
  auto params = [&](const std::string& text) { std::ofstream(dir / "params.json") << text; };
  params("{\"dtype\": 5}");
  expect_error("", "run flash_attention --load " + dir.string(), "dtype must be a string");
  params("{\"dtype\": \"f32\", \"scalars\": {\"causal\": \"yes\"}}");
  expect_error("", "run flash_attention --load " + dir.string(), "scalars.causal must be a bool");
  params("{\"dtype\": \"f32\", \"scalars\": {\"casual\": true}}");
  expect_error("", "run flash_attention --load " + dir.string(), "has no scalar 'casual'");
  params("not json");
  expect_error("", "run flash_attention --load " + dir.string(), "not a JSON object");
  params("{\"dtype\": \"f32\"}");
  // A header whose shape overflows: refused before anything is allocated.
  const std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 2), }";
  std::ofstream npy(dir / "q.npy", std::ios::binary);
  npy << "\x93NUMPY" << char(1) << char(0) << char(header.size() + 1) << char(0) << header << '\n';
  npy.close();
  expect_error("", "run flash_attention --load " + dir.string(), "q.npy");
  fs::remove_all(dir);
}

TEST_CASE("empty problems run and check", "[cli][errors]") {
  // A built-in tile: the heuristic's 32 for empty sequences needs the CPU JIT.
  const Proc p = sh("", kEjk + " run flash_attention --sq 0 --sk 0 --block-q 64 --iters 1 --check --json");
  INFO(p.out);
  CHECK(p.status == 0);
  CHECK_THAT(p.out, ContainsSubstring("\"check\":\"pass\""));
}
