// Hostile input through the `ejk` and `ejk-gen` binaries, each a known reproducer: --load
// validates before it converts or reads, files are regular files only, JSON depth is bounded,
// --save and bundle --out never write through symlinks or into devices, user patterns match in
// linear time. Each must end in a clean error (exit 2) or success, within the 60 s limit.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "cli_shell.h"

namespace fs = std::filesystem;
using Catch::Matchers::ContainsSubstring;

namespace {

using ejk::test::Proc;

Proc sh(const std::string& cmd) { return ejk::test::shell("timeout 60 " + cmd); }

const std::string kEjk = EJK_CLI_PATH;
const std::string kGen = std::string(EJK_GEN_PATH) + " --specs " + EJK_SPECS_DIR;

void expect_error(const std::string& args, const std::string& what) {
  const Proc p = sh(kEjk + " " + args);
  INFO("ejk " << args << "\n" << p.out);
  CHECK(p.status == 2);
  CHECK_THAT(p.out, ContainsSubstring(what));
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag) {
    path = fs::temp_directory_path() / ("ejk-harden-" + tag + "-" + std::to_string(getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}
void write_text(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

// A 1-D .npy file of `descr` with raw little-endian element bytes.
void write_npy_1d(const fs::path& p, const std::string& descr, size_t n, const std::vector<uint8_t>& data) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + std::to_string(n) + ",), }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream f(p, std::ios::binary);
  f << "\x93NUMPY" << char(1) << char(0) << char(header.size() & 0xff) << char(header.size() >> 8) << header;
  f.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
}

std::vector<uint8_t> i32_bytes(const std::vector<int32_t>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  for (size_t i = 0; i < v.size(); ++i)
    for (int b = 0; b < 4; ++b) out[i * 4 + b] = uint8_t(uint32_t(v[i]) >> (8 * b));
  return out;
}

// A folder saved by a successful run of `args`.
void save(const std::string& args, const fs::path& dir) {
  const Proc p = sh(kEjk + " run " + args + " --iters 1 --save " + dir.string());
  INFO(p.out);
  REQUIRE(p.status == 0);
}

}  // namespace

TEST_CASE("load: checks every tensor's dtype against the spec before converting it", "[cli][harden][load]") {
  TempDir d("dtype");
  const std::string params = (d.path / "params.json").string();
  const std::vector<std::pair<std::string, std::string>> ops = {
      {"flash_attention --b 1 --sq 16 --sk 16 --hq 2 --hkv 1 --d 64 --block-q 64", "flash_attention"},
      {"mean_pooling --b 2 --t 8 --d 16", "mean_pooling"},
      {"merge_attention_states --t 8 --h 2 --d 16", "merge_attention_states"}};
  for (const auto& [args, op] : ops) {
    save(args, d.path);
    const std::string saved = read_text(params);
    write_text(params, std::regex_replace(saved, std::regex("\"f32\""), "\"u8\""));
    expect_error("run " + op + " --load " + d.path.string(), "expected dtype");
    write_text(params, std::regex_replace(saved, std::regex("\"f32\""), "\"uint8\""));
    expect_error("run " + op + " --load " + d.path.string(), "expected dtype");
    // The same key twice: which one counts would be a guess.
    write_text(params, std::regex_replace(saved, std::regex("\"dtype\": \"f32\""), "\"dtype\": \"f32\", \"dtype\": \"u8\""));
    expect_error("run " + op + " --load " + d.path.string(), "\"dtype\" is given twice");
    write_text(params, saved);
    // --block-q 64: a built-in variant, so this runs without the JIT too.
    const std::string tuning = op == "flash_attention" ? " --block-q 64" : "";
    const Proc ok = sh(kEjk + " run " + op + " --load " + d.path.string() + tuning + " --iters 1 --check");
    INFO(ok.out);
    CHECK(ok.status == 0);
    fs::remove_all(d.path);
    fs::create_directories(d.path);
  }
}

TEST_CASE("load: --varlen checks cum_seqlens' dtype and values before reading them", "[cli][harden][load]") {
  TempDir d("varlen");
  save("flash_attention --b 2 --sq 20 --sk 20 --hq 2 --hkv 1 --d 64 --varlen --block-q 64", d.path);
  const std::string load = "run flash_attention --load " + d.path.string();
  const fs::path cq = d.path / "cum_seqlens_q.npy";
  write_npy_1d(cq, "|u1", 4096, std::vector<uint8_t>(4096, 200));
  expect_error(load, "cum_seqlens_q");
  write_npy_1d(cq, "<f2", 3, {0, 0, 0, 0x80, 0, 0x82});
  expect_error(load, "cum_seqlens_q");
  write_npy_1d(cq, "<i4", 3, i32_bytes({-2147483647 - 1, 2147483647, 20}));
  expect_error(load, "cum_seqlens_q");
  // A bad last entry is reported as what it is, not as a max_seqlen_q the user never gave.
  write_npy_1d(cq, "<i4", 3, i32_bytes({0, 5, 21}));
  const Proc p = sh(kEjk + " " + load);
  INFO(p.out);
  CHECK(p.status == 2);
  CHECK_THAT(p.out, ContainsSubstring("cum_seqlens_q"));
  CHECK_THAT(p.out, !ContainsSubstring("max_seqlen_q"));
}

TEST_CASE("load: opens regular files only and bounds the JSON's depth", "[cli][harden][load]") {
  TempDir d("files");
  save("mean_pooling --b 2 --t 8 --d 16", d.path);
  const std::string load = "run mean_pooling --load " + d.path.string();
  const fs::path params = d.path / "params.json";
  const std::string saved = read_text(params);
  fs::remove(params);
  REQUIRE(::mkfifo(params.c_str(), 0600) == 0);
  const Proc fifo = sh(kEjk + " " + load);
  INFO(fifo.out);
  CHECK(fifo.status == 2);
  CHECK_THAT(fifo.out, ContainsSubstring("FIFO"));
  fs::remove(params);
  fs::create_directory(params);
  expect_error(load, "is a directory");
  fs::remove(params);
  write_text(d.path / "elsewhere.json", saved);
  fs::create_symlink(d.path / "elsewhere.json", params);
  expect_error(load, "symlink");
  fs::remove(params);
  const fs::path x = d.path / "x.npy";
  fs::rename(x, d.path / "x-real.npy");
  REQUIRE(::mkfifo(x.c_str(), 0600) == 0);
  write_text(params, saved);
  expect_error(load, "FIFO");
  fs::remove(x);
  fs::rename(d.path / "x-real.npy", x);
  // 60,000 levels once overflowed the stack; the message must not echo the whole value.
  write_text(params, "{\"dtype\": \"f32\", \"scalars\": " + std::string(60000, '[') + std::string(60000, ']') + "}");
  const Proc deep = sh(kEjk + " " + load);
  INFO(deep.out.substr(0, 400));
  CHECK(deep.status == 2);
  CHECK_THAT(deep.out, ContainsSubstring("nested deeper than"));
  CHECK(deep.out.size() < 1000);
  write_text(params, "{\"dtype\": \"f32\", \"seed\": -1}");
  expect_error(load, "seed must be a non-negative integer");
  write_text(params, "{\"dtype\": \"f32\", \"scalars\": {\"num_tokens\": 18446744073709551615}}");
  expect_error("run mean_pooling_backward --load " + d.path.string(), "scalars.num_tokens must be");
}

TEST_CASE("save: writes no file through a symlink and reports a failed write", "[cli][harden][save]") {
  TempDir d("save");
  const fs::path victim = d.path / "victim", out = d.path / "out";
  write_text(victim, "precious");
  fs::create_directories(out);
  fs::create_symlink(victim, out / "params.json");
  const std::string run = "run mean_pooling --b 2 --t 8 --d 16 --iters 1 --save ";
  expect_error(run + out.string(), "symlink");
  fs::remove(out / "params.json");
  fs::remove(out / "x.npy");  // written before params.json was refused
  fs::create_symlink(victim, out / "x.npy");
  expect_error(run + out.string(), "symlink");
  CHECK(read_text(victim) == "precious");
  fs::create_symlink(out, d.path / "link");
  expect_error(run + (d.path / "link").string(), "--save");
  expect_error(run + "/dev/null", "--save /dev/null");
  expect_error(run + "/proc", "/proc");
  expect_error(run + (d.path / std::string(300, 'n')).string(), "--save");
}

TEST_CASE("mean_pooling --b 0 --varlen with tokens is refused, not a crash", "[cli][harden]") {
  expect_error("run mean_pooling --b 0 --t 5 --d 8 --varlen", "--b 0 --varlen");
  const Proc empty = sh(kEjk + " run mean_pooling --b 0 --t 0 --d 8 --varlen --iters 1 --check");
  INFO(empty.out);
  CHECK(empty.status == 0);
}

TEST_CASE("a problem whose inputs exceed the host's memory is refused before any is made", "[cli][harden]") {
  // 2^31 group sizes: 8 GiB of i32 and a sort of as many cuts, once a 60 s hang; a bound of the
  // case's own, as a host with 128 GiB would take that much.
  expect_error("run grouped_matmul --m 130 --k 96 --n 72 --groups 5 --total-groups 2147483648 --iters 1",
               "--total-groups: expected a decimal integer from 0 to 16777216, got '2147483648'");
  expect_error("run mean_pooling --b 65536 --t 65536 --d 4096 --iters 1", "of this machine's");
}

TEST_CASE("user patterns match in linear time with bounded nesting", "[cli][harden][pattern]") {
  const std::string nested = std::string(20000, '(') + "mean" + std::string(20000, ')');
  TempDir d("pattern");
  const std::string out = " --out " + (d.path / "b.ejkb").string();
  expect_error("bundle build --variants '" + nested + "'" + out, "nested deeper than");
  Proc p = sh(kEjk + " bundle build --variants '(.*)*X'" + out);
  INFO(p.out);
  CHECK(p.status == 2);
  CHECK_THAT(p.out, ContainsSubstring("matches --variants"));
  CHECK(p.seconds < 30);
  p = sh(kGen + " list --variants '" + nested + "'");
  CHECK(p.status != 0);
  CHECK_THAT(p.out, ContainsSubstring("nested deeper than"));
  p = sh(kGen + " list --variants '(.*)*X'");
  INFO(p.out);
  CHECK(p.status == 0);
  CHECK(p.out.empty());
  p = sh(kGen + " list --variants 'mean_pool_fwd\\.cpu'");
  CHECK(p.status == 0);
  CHECK_THAT(p.out, ContainsSubstring("mean_pool_fwd.cpu."));
}

TEST_CASE("bundle build --out replaces only a regular file of this user", "[cli][harden][bundle]") {
  TempDir d("out");
  const fs::path fifo = d.path / "fifo", link = d.path / "link", victim = d.path / "victim";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  write_text(victim, "precious");
  fs::create_symlink(victim, link);
  const std::string build = "bundle build --key mean_pool_fwd.cpu.avx512.f32 --out ";
  expect_error(build + fifo.string(), "is a FIFO");
  expect_error(build + link.string(), "is a symlink");
  expect_error(build + d.path.string(), "is a directory");
  CHECK(fs::is_fifo(fifo));
  CHECK(read_text(victim) == "precious");
}

TEST_CASE("messages name the option as it is spelled and stay short", "[cli][harden][messages]") {
  expect_error("run flash_attention --b 1 --sq 16 --sk 16 --hq 1 --hkv 1 --d 64 --block-q 0", "--block-q:");
  expect_error("run flash_attention --b 1 --sq 16 --sk 16 --hq 1 --hkv 1 --d 64 --causal=2", "--causal: a flag takes no value, got '2'");
  expect_error("run mean_pooling --varlen=no", "--varlen: a flag takes no value");
  TempDir d("msg");
  const Proc p = sh(kEjk + " bundle build --key mean_pool_fwd.cpu.avx2.f32 --jobs 0 --out " + (d.path / "b").string());
  INFO(p.out);
  CHECK(p.status == 2);
  CHECK_THAT(p.out, ContainsSubstring("--jobs"));
  CHECK(p.out.find("179769") == std::string::npos);  // DBL_MAX in full
  const Proc tilde = sh("env EJK_CACHE_DIR='~' " + kEjk + " cache ls");
  INFO(tilde.out);
  CHECK(tilde.status == 2);
  CHECK_THAT(tilde.out, ContainsSubstring("EJK_CACHE_DIR"));
}

TEST_CASE("cache ls and verify count entries, not the other files beside them", "[cli][harden][cache]") {
  TempDir d("cache");
  fs::create_directories(d.path / "v2" / "cpu");  // the cache's root is EJK_CACHE_DIR/v<format version>
  fs::permissions(d.path, fs::perms::owner_all);
  write_text(d.path / "v2" / "cpu" / "stray.txt", "not an entry");
  const std::string env = "env EJK_CACHE_DIR=" + d.path.string() + " ";
  const Proc ls = sh(env + kEjk + " cache ls");
  INFO(ls.out);
  CHECK(ls.status == 0);
  CHECK_THAT(ls.out, ContainsSubstring("(0 entries, 1 other files)"));
  const Proc verify = sh(env + kEjk + " cache verify");
  INFO(verify.out);
  CHECK(verify.status == 1);
  CHECK_THAT(verify.out, ContainsSubstring("0 of 0 entries valid; 1 files that are not entries"));
}
