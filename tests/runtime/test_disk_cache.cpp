// Disk cache: entry format and verification, listing, clearing, the get_or_build protocol
// across threads and processes, and EJK_DISABLE_JIT.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "cache/disk_cache.h"
#include "cache/get_or_build.h"
#include "cache_test_payload.h"
#include "ejk/core/error.h"
#include "test_support.h"
#include "util/hash.h"

extern char** environ;

namespace fs = std::filesystem;
using Catch::Matchers::ContainsSubstring;
using ejk::cache::DiskCache;

namespace {

// The default root's last part: the entry format's version.
const std::string kVersionDir = "v" + std::to_string(ejk::cache::kFormatVersion);

struct Fixture {
  uint64_t seed = ejk::test::fresh_seed();
  std::mt19937_64 rng{seed};
  ejk::test::TempDir dir;
  DiskCache cache{dir.path() / "v1"};

  std::string key() { return "flash_fwd.cpu.test.d" + std::to_string(rng() % 1000) + ".k" +
                             ejk::test::random_hex(rng, 8); }
  std::string hash() { return ejk::test::random_hex(rng, 32); }
  std::vector<uint8_t> payload() { return ejk::test::random_bytes(rng, 1 + rng() % 100000); }
};

std::vector<uint8_t> read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_all(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST_CASE("store then load returns the same bytes", "[cache]") {
  Fixture f;
  CAPTURE(f.seed);
  std::string key = f.key(), hash = f.hash();
  auto payload = f.payload();
  REQUIRE_FALSE(f.cache.load("cpu", key, hash).has_value());

  f.cache.store("cpu", key, hash, payload);
  fs::path path = f.cache.entry_path("cpu", key, hash);
  CHECK(path == f.dir.path() / "v1" / "cpu" / (key + "-" + hash.substr(0, 16) + ".bin"));
  CHECK(fs::exists(path));
  auto loaded = f.cache.load("cpu", key, hash);
  REQUIRE(loaded.has_value());
  CHECK(*loaded == payload);

  // Another hash or backend is another entry.
  CHECK_FALSE(f.cache.load("cpu", key, f.hash()).has_value());
  CHECK_FALSE(f.cache.load("cuda", key, hash).has_value());
  CHECK(fs::exists(path));  // a plain miss removes nothing
}

TEST_CASE("a flipped payload byte is a miss and the entry is removed", "[cache]") {
  Fixture f;
  CAPTURE(f.seed);
  std::string key = f.key(), hash = f.hash();
  auto payload = f.payload();
  f.cache.store("cpu", key, hash, payload);
  fs::path path = f.cache.entry_path("cpu", key, hash);
  auto bytes = read_all(path);
  size_t payload_start = bytes.size() - payload.size();
  size_t at = payload_start + f.rng() % payload.size();
  bytes[at] ^= static_cast<uint8_t>(1u << (f.rng() % 8));
  write_all(path, bytes);
  CAPTURE(at);

  CHECK_FALSE(f.cache.load("cpu", key, hash).has_value());
  CHECK_FALSE(fs::exists(path));
}

TEST_CASE("a truncated entry is a miss and is removed", "[cache]") {
  Fixture f;
  CAPTURE(f.seed);
  std::string key = f.key(), hash = f.hash();
  f.cache.store("cpu", key, hash, f.payload());
  fs::path path = f.cache.entry_path("cpu", key, hash);
  auto bytes = read_all(path);
  size_t keep = f.rng() % bytes.size();  // anything from empty to one byte short
  CAPTURE(keep);
  bytes.resize(keep);
  write_all(path, bytes);

  CHECK_FALSE(f.cache.load("cpu", key, hash).has_value());
  CHECK_FALSE(fs::exists(path));
}

TEST_CASE("an entry whose header names another key or hash is not returned", "[cache]") {
  Fixture f;
  CAPTURE(f.seed);
  std::string key = f.key(), other_key = f.key(), hash = f.hash();
  f.cache.store("cpu", key, hash, f.payload());

  SECTION("file moved to another key's name") {
    fs::rename(f.cache.entry_path("cpu", key, hash), f.cache.entry_path("cpu", other_key, hash));
    CHECK_FALSE(f.cache.load("cpu", other_key, hash).has_value());
    CHECK_FALSE(fs::exists(f.cache.entry_path("cpu", other_key, hash)));
  }
  SECTION("hash that shares the file name's 16-character prefix") {
    std::string colliding = hash.substr(0, 16) + f.hash().substr(0, 16);
    REQUIRE(colliding != hash);
    REQUIRE(f.cache.entry_path("cpu", key, colliding) == f.cache.entry_path("cpu", key, hash));
    CHECK_FALSE(f.cache.load("cpu", key, colliding).has_value());
  }
  SECTION("file moved to another backend") {
    fs::create_directories(f.cache.root() / "cuda");
    fs::rename(f.cache.entry_path("cpu", key, hash), f.cache.entry_path("cuda", key, hash));
    CHECK_FALSE(f.cache.load("cuda", key, hash).has_value());
  }
}

TEST_CASE("list reports entries, verify finds payload damage, clear removes all", "[cache]") {
  Fixture f;
  CAPTURE(f.seed);
  std::string k1 = f.key(), k2 = f.key(), k3 = f.key();
  std::string h1 = f.hash(), h2 = f.hash(), h3 = f.hash();
  // Backends without a payload format ("test", "other"): random payloads are valid entries.
  f.cache.store("test", k1, h1, f.payload());
  f.cache.store("test", k2, h2, f.payload());
  f.cache.store("other", k3, h3, f.payload());
  { auto held_then_released = f.cache.lock("test", k1, h1); }

  auto all = f.cache.list(/*verify=*/true);
  REQUIRE(all.size() == 3);
  for (const auto& e : all) {
    CHECK(e.valid);
    CHECK(e.problem.empty());
    CHECK(e.size == fs::file_size(e.path));
  }

  // Damage k2's payload (last byte): headers stay fine, only verification sees it.
  fs::path p2 = f.cache.entry_path("test", k2, h2);
  auto bytes = read_all(p2);
  bytes.back() ^= 0x5a;
  write_all(p2, bytes);
  auto quick = f.cache.list(/*verify=*/false);
  REQUIRE(quick.size() == 3);
  for (const auto& e : quick) CHECK(e.valid);
  auto verified = f.cache.list(/*verify=*/true);
  REQUIRE(verified.size() == 3);
  for (const auto& e : verified) {
    CAPTURE(e.key, e.problem);
    CHECK(e.valid == (e.key != k2));
    if (e.key == k2) CHECK_THAT(e.problem, ContainsSubstring("checksum"));
    if (e.key == k3) CHECK(e.backend == "other");
    if (e.key == k1) CHECK(e.hash_hex == h1);
  }

  CHECK(f.cache.clear() == 3);
  CHECK(f.cache.list(true).empty());
  CHECK_FALSE(fs::exists(fs::path(f.cache.entry_path("test", k1, h1)).replace_extension(".lock")));
}

TEST_CASE("verify finds a flip in any byte of an entry's header", "[cache]") {
  Fixture f;
  CAPTURE(f.seed);
  const std::string key = f.key(), hash = f.hash();
  f.cache.store("test", key, hash, f.payload());
  const fs::path path = f.cache.entry_path("test", key, hash);
  const std::vector<uint8_t> good = read_all(path);
  // Fixed fields, backend, key and the stored hash: the listing knows only the file name.
  const size_t header = 40 + 4 + key.size() + hash.size();
  for (size_t at = 0; at < header; ++at) {
    CAPTURE(at);
    std::vector<uint8_t> bad = good;
    bad[at] ^= uint8_t(1u << (f.rng() % 8));
    write_all(path, bad);
    const auto listed = f.cache.list(/*verify=*/true);
    CHECK((listed.size() == 1 && !listed[0].valid));
  }
}

TEST_CASE("clear removes a FIFO, directory or symlink at an entry's path, never a link's target", "[cache]") {
  Fixture f;
  CAPTURE(f.seed);
  const std::string k1 = f.key(), k2 = f.key(), k3 = f.key(), h = f.hash();
  f.cache.store("test", f.key(), f.hash(), f.payload());  // makes the backend directory
  const fs::path fifo = f.cache.entry_path("test", k1, h), dir = f.cache.entry_path("test", k2, h),
                 link = f.cache.entry_path("test", k3, h), victim = fs::path(link).replace_filename("victim.txt");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  fs::create_directories(fs::path(dir) / "inside");
  write_all(victim, {1, 2, 3});
  fs::create_symlink(victim, link);
  CHECK(f.cache.clear() == 4);
  CHECK_FALSE(fs::exists(fs::symlink_status(fifo)));
  CHECK_FALSE(fs::exists(fs::symlink_status(dir)));
  CHECK_FALSE(fs::exists(fs::symlink_status(link)));
  CHECK(fs::exists(victim));
}

TEST_CASE("list flags a truncated entry without verifying payloads", "[cache]") {
  Fixture f;
  CAPTURE(f.seed);
  std::string key = f.key(), hash = f.hash();
  f.cache.store("cpu", key, hash, f.payload());
  fs::path path = f.cache.entry_path("cpu", key, hash);
  fs::resize_file(path, fs::file_size(path) - 1 - f.rng() % 16);
  auto entries = f.cache.list(false);
  REQUIRE(entries.size() == 1);
  CHECK_FALSE(entries[0].valid);
  CHECK_THAT(entries[0].problem, ContainsSubstring("truncated"));
  CHECK(fs::exists(path));  // listing never removes
  // Cut inside the fixed header and inside the names after it (a short payload puts the random
  // cut above there too): still reported as truncated.
  for (uintmax_t size : {uintmax_t{20}, uintmax_t{60}}) {
    CAPTURE(size);
    fs::resize_file(path, size);
    auto short_entries = f.cache.list(false);
    REQUIRE(short_entries.size() == 1);
    CHECK_FALSE(short_entries[0].valid);
    CHECK_THAT(short_entries[0].problem, ContainsSubstring("truncated"));
  }
}

TEST_CASE("bad backend, key or hash names the argument", "[cache]") {
  Fixture f;
  auto payload = f.payload();
  CHECK_THROWS_WITH(f.cache.store("cpu", "../escape", f.hash(), payload),
                    ContainsSubstring("cache key \"../escape\""));
  CHECK_THROWS_AS(f.cache.store("cpu", "a/b", f.hash(), payload), ejk::InvalidArgument);
  CHECK_THROWS_WITH(f.cache.load("CPU", f.key(), f.hash()), ContainsSubstring("cache backend"));
  CHECK_THROWS_WITH(f.cache.load("cpu", f.key(), "XYZ"), ContainsSubstring("cache hash \"XYZ\""));
}

TEST_CASE("default_root follows EJK_CACHE_DIR, then XDG_CACHE_HOME, then HOME", "[cache]") {
  ejk::test::TempDir dir;
  std::string base = dir.path().string();
  {
    ejk::test::ScopedEnv a("EJK_CACHE_DIR", base + "/explicit");
    ejk::test::ScopedEnv b("XDG_CACHE_HOME", base + "/xdg");
    CHECK(ejk::cache::default_root() == fs::path(base) / "explicit" / kVersionDir);
  }
  {
    ejk::test::ScopedEnv a("EJK_CACHE_DIR", std::nullopt);
    ejk::test::ScopedEnv b("XDG_CACHE_HOME", base + "/xdg");
    CHECK(ejk::cache::default_root() == fs::path(base) / "xdg" / "ejkernel" / kVersionDir);
  }
  {
    ejk::test::ScopedEnv a("EJK_CACHE_DIR", std::nullopt);
    ejk::test::ScopedEnv b("XDG_CACHE_HOME", "relative/ignored");
    ejk::test::ScopedEnv c("HOME", base + "/home");
    CHECK(ejk::cache::default_root() == fs::path(base) / "home" / ".cache" / "ejkernel" / kVersionDir);
  }
}

TEST_CASE("hash_strings_hex is length-prefixed and stable", "[cache]") {
  std::string h = ejk::util::hash_strings_hex({"ab", "c"});
  CHECK(h.size() == 32);
  CHECK(ejk::util::is_lower_hex(h));
  CHECK(h == ejk::util::hash_strings_hex({"ab", "c"}));
  CHECK(h != ejk::util::hash_strings_hex({"a", "bc"}));
  CHECK(h != ejk::util::hash_strings_hex({"abc"}));
  CHECK(ejk::util::hash_strings_hex({""}) != ejk::util::hash_strings_hex({"", ""}));
}

TEST_CASE("get_or_build builds once, then serves from the cache", "[cache][get_or_build]") {
  Fixture f;
  CAPTURE(f.seed);
  std::string key = f.key(), hash = f.hash();
  auto payload = f.payload();
  int builds = 0;
  auto builder = [&] {
    ++builds;
    return payload;
  };
  auto first = ejk::cache::get_or_build(f.cache, "cpu", key, hash, builder);
  CHECK(first.source == ejk::cache::Source::Jit);
  CHECK(first.bytes == payload);
  CHECK(first.build_ms >= 0.0);
  auto second = ejk::cache::get_or_build(f.cache, "cpu", key, hash, builder);
  CHECK(second.source == ejk::cache::Source::Cache);
  CHECK(second.bytes == payload);
  CHECK(second.build_ms == 0.0);
  CHECK(builds == 1);
}

TEST_CASE("a failing builder stores nothing", "[cache][get_or_build]") {
  Fixture f;
  std::string key = f.key(), hash = f.hash();
  auto failing = []() -> std::vector<uint8_t> { throw ejk::CompileError("deliberate failure"); };
  CHECK_THROWS_WITH(ejk::cache::get_or_build(f.cache, "cpu", key, hash, failing),
                    ContainsSubstring("deliberate failure"));
  CHECK_FALSE(f.cache.load("cpu", key, hash).has_value());
  auto empty = [] { return std::vector<uint8_t>(); };
  CHECK_THROWS_AS(ejk::cache::get_or_build(f.cache, "cpu", key, hash, empty), ejk::CompileError);
}

TEST_CASE("EJK_DISABLE_JIT=1 turns a miss into an error naming the key", "[cache][get_or_build]") {
  Fixture f;
  CAPTURE(f.seed);
  std::string key = f.key(), hash = f.hash(), cached_key = f.key();
  auto payload = f.payload();
  f.cache.store("cpu", cached_key, hash, payload);
  ejk::test::ScopedEnv disable("EJK_DISABLE_JIT", "1");
  bool built = false;
  auto builder = [&] {
    built = true;
    return payload;
  };
  CHECK_THROWS_AS(ejk::cache::get_or_build(f.cache, "cpu", key, hash, builder),
                  ejk::CompileError);
  CHECK_THROWS_WITH(ejk::cache::get_or_build(f.cache, "cpu", key, hash, builder),
                    ContainsSubstring("variant " + key + " is not built in and not cached") &&
                        ContainsSubstring(hash) && ContainsSubstring("EJK_DISABLE_JIT=1"));
  CHECK_FALSE(built);
  // Cached variants still load.
  auto hit = ejk::cache::get_or_build(f.cache, "cpu", cached_key, hash, builder);
  CHECK(hit.source == ejk::cache::Source::Cache);
  CHECK(hit.bytes == payload);
}

TEST_CASE("8 threads racing for one missing entry build it once", "[cache][get_or_build]") {
  Fixture f;
  CAPTURE(f.seed);
  std::string key = f.key(), hash = f.hash();
  auto payload = f.payload();
  std::atomic<int> builds{0};
  std::vector<ejk::cache::BuildResult> results(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      results[i] = ejk::cache::get_or_build(f.cache, "cpu", key, hash, [&] {
        ++builds;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        return payload;
      });
    });
  }
  for (auto& t : threads) t.join();
  CHECK(builds == 1);
  for (const auto& r : results) CHECK(r.bytes == payload);
}

namespace {

pid_t spawn_worker(const std::vector<std::string>& args, const fs::path& stdout_path) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, stdout_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("posix_spawn failed for " + args[0]);
  return pid;
}

std::string read_text(const fs::path& path) { return ejk::test::read_text_file(path); }

}  // namespace

TEST_CASE("8 processes racing for one missing entry build it once", "[cache][get_or_build]") {
  Fixture f;
  CAPTURE(f.seed);
  std::string key = f.key(), hash = f.hash();
  size_t size = 1 + f.rng() % 200000;
  fs::path counter = f.dir.path() / "builds.txt";
  auto start_at = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch()) +
                  std::chrono::milliseconds(300);
  std::vector<pid_t> pids;
  for (int i = 0; i < 8; ++i) {
    pids.push_back(spawn_worker({EJK_CACHE_WORKER, f.cache.root().string(), key, hash,
                                 counter.string(), std::to_string(start_at.count()), "200",
                                 std::to_string(size)},
                                f.dir.path() / ("worker" + std::to_string(i) + ".out")));
  }
  int jit = 0, cache_hits = 0;
  for (int i = 0; i < 8; ++i) {
    int status = 0;
    REQUIRE(::waitpid(pids[i], &status, 0) == pids[i]);
    CAPTURE(i, status);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    std::string source = read_text(f.dir.path() / ("worker" + std::to_string(i) + ".out"));
    jit += source == "jit\n";
    cache_hits += source == "cache\n";
  }
  std::string builds = read_text(counter);
  CAPTURE(builds);
  CHECK(std::count(builds.begin(), builds.end(), '\n') == 1);
  CHECK(jit == 1);
  CHECK(cache_hits == 7);
  auto stored = f.cache.load("test", key, hash);
  REQUIRE(stored.has_value());
  CHECK(*stored == ejk::test::payload_for_hash(hash, size));
}

TEST_CASE("a stopped process holding the lock costs a bounded wait, then a local compile",
          "[cache][get_or_build][faults]") {
  Fixture f;
  CAPTURE(f.seed);
  std::string key = f.key(), hash = f.hash();
  fs::path out = f.dir.path() / "holder.out";
  pid_t holder = spawn_worker({EJK_CACHE_WORKER, "hold", f.cache.root().string(), key, hash}, out);
  auto ready_by = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (read_text(out) != "locked\n" && std::chrono::steady_clock::now() < ready_by)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(read_text(out) == "locked\n");
  REQUIRE(::kill(holder, SIGSTOP) == 0);  // like a compiler stopped by ^Z or a debugger

  ejk::test::ScopedEnv timeout("EJK_CACHE_LOCK_TIMEOUT_S", "1");
  auto payload = f.payload();
  ejk::test::StderrCapture err;
  auto start = std::chrono::steady_clock::now();
  auto result = ejk::cache::get_or_build(f.cache, "test", key, hash, [&] { return payload; });
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string warnings = err.text();
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);

  CHECK(result.source == ejk::cache::Source::Jit);
  CHECK(result.bytes == payload);
  CHECK(waited >= 0.9);
  CHECK(waited < 10.0);
  CHECK_THAT(warnings, ContainsSubstring("EJK_CACHE_LOCK_TIMEOUT_S") &&
                           ContainsSubstring("compiling it here"));
  CHECK(f.cache.load("test", key, hash) == payload);  // stored for everyone after it
}

TEST_CASE("EJK_CACHE_LOCK_TIMEOUT_S is parsed strictly", "[cache][env]") {
  {
    ejk::test::ScopedEnv unset("EJK_CACHE_LOCK_TIMEOUT_S", std::nullopt);
    CHECK(ejk::cache::lock_timeout() == std::chrono::seconds(60));
  }
  for (const char* bad : {"abc", "-1", "1.5", "0x10", "86401", " 5"}) {
    CAPTURE(bad);
    ejk::test::ScopedEnv env("EJK_CACHE_LOCK_TIMEOUT_S", bad);
    CHECK_THROWS_WITH(ejk::cache::lock_timeout(), ContainsSubstring("EJK_CACHE_LOCK_TIMEOUT_S"));
  }
  ejk::test::ScopedEnv zero("EJK_CACHE_LOCK_TIMEOUT_S", "0");
  CHECK(ejk::cache::lock_timeout() == std::chrono::seconds(0));
}
