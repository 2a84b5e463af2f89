// Read-side faults of the disk cache (issue 36, defects 4, 5 and 9): whatever is at an entry's
// path or on the way to the root, a run falls back to compiling in memory with a warning,
// never blocks, never exits; `list` reports every non-entry; temp files of dead writers are
// shown and cleaned.
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "cache/disk_cache.h"
#include "cache/get_or_build.h"
#include "test_support.h"
#include "util/hash.h"

namespace fs = std::filesystem;
using Catch::Matchers::ContainsSubstring;
using ejk::cache::DiskCache;
using ejk::cache::Source;
using ejk::test::StderrCapture;

namespace {

const std::string kKey = "flash_fwd.cpu.test.d64";
const std::string kHash = "0123456789abcdef0123456789abcdef";
const std::vector<uint8_t> kBuilt = {'b', 'u', 'i', 'l', 't'};

ejk::cache::Builder builder() {
  return [] { return kBuilt; };
}

// get_or_build in a child process (a hang is a failure, not a stalled suite), as `uid` when
// given. 0: it compiled (and, as `uid`, found the cache unusable); 1: the bytes came from the
// cache; 2: wrong bytes; 3: as `uid` the cache was usable after all.
int build_in_child(const fs::path& root, std::optional<uid_t> uid = std::nullopt) {
  return ejk::test::run_in_child(
      [&] {
        if (uid && (::setgid(*uid) != 0 || ::setuid(*uid) != 0)) return 10;
        DiskCache cache(root);
        auto r = ejk::cache::get_or_build(cache, "cpu", kKey, kHash, builder());
        if (r.bytes != kBuilt) return 2;
        if (r.source != Source::Jit) return 1;
        return uid && !cache.unusable("cpu") ? 3 : 0;
      },
      std::chrono::seconds(20));
}

const ejk::cache::EntryInfo* find_problem(const std::vector<ejk::cache::EntryInfo>& listed,
                                          const std::string& text) {
  for (const auto& e : listed)
    if (e.problem.find(text) != std::string::npos) return &e;
  return nullptr;
}

void set_age(const fs::path& path, int seconds) {
  struct timeval times[2];
  ::gettimeofday(&times[0], nullptr);
  times[0].tv_sec -= seconds;
  times[1] = times[0];
  REQUIRE(::utimes(path.c_str(), times) == 0);
}

pid_t dead_pid() {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

}  // namespace

TEST_CASE("a FIFO at an entry's path neither blocks nor fails the run", "[cache][faults]") {
  ejk::test::TempDir dir;
  DiskCache cache(dir.path() / "v1");
  fs::create_directories(cache.root() / "cpu");
  fs::path entry = cache.entry_path("cpu", kKey, kHash);
  REQUIRE(::mkfifo(entry.c_str(), 0644) == 0);
  CHECK(build_in_child(cache.root()) == 0);  // -1 would be a hang on open()
  const auto entries = cache.list(true);
  const auto* listed = find_problem(entries, "a fifo at an entry's path");
  REQUIRE(listed != nullptr);
  CHECK(listed->kind == "other");
  CHECK_FALSE(listed->valid);
}

TEST_CASE("a directory or a link at an entry's path falls back with a warning", "[cache][faults]") {
  ejk::test::TempDir dir;
  DiskCache cache(dir.path() / "v1");
  fs::create_directories(cache.root() / "cpu");
  fs::path entry = cache.entry_path("cpu", kKey, kHash);
  std::string kind;
  SECTION("directory (EISDIR)") {
    fs::create_directories(entry);
    kind = "directory";
  }
  SECTION("symbolic link") {
    fs::create_symlink("/etc/passwd", entry);
    kind = "symbolic link";
  }
  StderrCapture err;
  auto r = ejk::cache::get_or_build(cache, "cpu", kKey, kHash, builder());
  CHECK(r.source == Source::Jit);
  CHECK(r.bytes == kBuilt);
  CHECK_THAT(err.text(), ContainsSubstring("cannot read the cache entry") && ContainsSubstring(kind));
  CHECK(find_problem(cache.list(true), "a " + kind + " at an entry's path") != nullptr);
}

TEST_CASE("roots that cannot be reached fall back to an in-memory compile", "[cache][faults]") {
  ejk::test::TempDir dir;
  fs::path root;
  std::string why;
  SECTION("ENOTDIR: a file on the way") {
    std::ofstream(dir.path() / "file") << "x";
    root = dir.path() / "file" / "v1";
    why = "is not a directory";
  }
  SECTION("ENAMETOOLONG") {
    root = dir.path() / std::string(300, 'n') / "v1";
    why = "File name too long";
  }
  SECTION("the root itself is a file") {
    std::ofstream(dir.path() / "v1") << "x";
    root = dir.path() / "v1";
    why = "is not a directory";
  }
  DiskCache cache(root);
  REQUIRE(cache.unusable("cpu").has_value());
  CHECK_THAT(*cache.unusable("cpu"), ContainsSubstring(why));
  StderrCapture err;
  CHECK(ejk::cache::get_or_build(cache, "cpu", kKey, kHash, builder()).source == Source::Jit);
  CHECK_THAT(err.text(), ContainsSubstring("compiling in memory"));
  CHECK_FALSE(cache.list(true).empty());  // the reason is listed, not an empty cache
}

TEST_CASE("EACCES on the way to the root or on v1/cpu falls back", "[cache][faults]") {
  if (!ejk::test::is_root()) SKIP("needs root to run a check as another user");
  ejk::test::TempDir dir;
  fs::permissions(dir.path(), fs::perms::others_exec | fs::perms::group_exec, fs::perm_options::add);
  SECTION("an ancestor this user cannot search") {
    fs::create_directories(dir.path() / "private");
    fs::permissions(dir.path() / "private", fs::perms::owner_all, fs::perm_options::replace);
    CHECK(build_in_child(dir.path() / "private" / "v1", ejk::test::kNobody) == 0);
  }
  SECTION("an unreadable v1/cpu (the user's own)") {
    fs::path root = dir.path() / "v1";
    DiskCache(root).store("cpu", kKey, kHash, kBuilt);
    fs::permissions(root / "cpu", fs::perms::none, fs::perm_options::replace);
    for (const fs::path& p : {root, root / "cpu"})
      REQUIRE(::chown(p.c_str(), ejk::test::kNobody, ejk::test::kNobody) == 0);
    int status = ejk::test::run_in_child([&] {
      if (::setgid(ejk::test::kNobody) != 0 || ::setuid(ejk::test::kNobody) != 0) return 10;
      DiskCache cache(root);
      auto r = ejk::cache::get_or_build(cache, "cpu", kKey, kHash, builder());
      if (r.source != Source::Jit) return 11;
      // `cache verify` names the directory it cannot read instead of "0 of 0 entries valid".
      auto listed = cache.list(true);
      if (!find_problem(listed, "Permission denied")) return 12;
      return 0;
    });
    CHECK(status == 0);
  }
}

TEST_CASE("list reports every non-entry, and clear leaves them alone", "[cache][faults]") {
  ejk::test::TempDir dir;
  DiskCache cache(dir.path() / "v1");
  cache.store("cpu", kKey, kHash, kBuilt);
  std::ofstream(cache.root() / "cpu" / "notes.txt") << "junk";
  std::ofstream(cache.root() / "stray") << "junk";
  fs::create_directories(cache.root() / "cpu" / "subdir");
  REQUIRE(::mkfifo((cache.root() / "cpu" / "pipe").c_str(), 0644) == 0);
  auto listed = cache.list(false);
  CHECK(listed.size() == 5);
  CHECK(find_problem(listed, "a regular file that is not a cache file") != nullptr);
  CHECK(find_problem(listed, "a directory that is not a cache file") != nullptr);
  CHECK(find_problem(listed, "a fifo that is not a cache file") != nullptr);
  CHECK(find_problem(listed, "not a backend directory") != nullptr);
  size_t valid = 0;
  for (const auto& e : listed) valid += e.valid;
  CHECK(valid == 1);
  CHECK(cache.clear() == 1);
  CHECK(fs::exists(cache.root() / "cpu" / "notes.txt"));
}

TEST_CASE("listing never echoes raw bytes from names or headers", "[cache][faults]") {
  ejk::test::TempDir dir;
  DiskCache cache(dir.path() / "v1");
  // An entry whose header key carries a terminal escape sequence, under a valid entry name.
  DiskCache(dir.path() / "other").store("cpu", "k", kHash, kBuilt);
  std::vector<uint8_t> bytes = ejk::test::read_bytes(DiskCache(dir.path() / "other").entry_path("cpu", "k", kHash));
  fs::create_directories(cache.root() / "cpu");
  std::ofstream(cache.entry_path("cpu", kKey, kHash), std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  // The key "k" follows the 40-byte fixed header and "cpu": make it ESC.
  {
    std::fstream f(cache.entry_path("cpu", kKey, kHash), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(43);
    f.put('\x1b');
  }
  std::ofstream(cache.root() / "cpu" / "\x1b]0;evil\x07-0123456789abcdef.bin") << "x";
  for (const auto& e : cache.list(true)) {
    CAPTURE(e.problem);
    CHECK(e.problem.find('\x1b') == std::string::npos);
    CHECK(e.key.find('\x1b') == std::string::npos);
  }
  CHECK(find_problem(cache.list(false), "header key \"\\x1b\"") != nullptr);
}

TEST_CASE("temp files of dead writers are listed and removed; live writers' are kept", "[cache][faults]") {
  ejk::test::TempDir dir;
  DiskCache cache(dir.path() / "v1");
  cache.store("cpu", kKey, kHash, kBuilt);
  const fs::path entry = cache.entry_path("cpu", kKey, kHash);
  auto temp_of = [&](long pid) {
    fs::path p = entry;
    p += ".tmp." + std::to_string(pid) + ".0123456789abcdef";
    std::ofstream(p) << std::string(1000, 'x');  // a full-size write, never renamed
    return p;
  };
  const pid_t dead = dead_pid();
  const fs::path crashed = temp_of(dead), live = temp_of(::getpid());
  set_age(crashed, 5);

  auto listed = cache.list(false);
  const auto* c = find_problem(listed, "writer pid " + std::to_string(dead) + " (gone");
  REQUIRE(c != nullptr);
  CHECK(c->kind == "temp");
  CHECK(c->size == 1000);
  CHECK(find_problem(listed, "being written by pid " + std::to_string(::getpid())) != nullptr);

  SECTION("the next store removes the dead writer's file") {
    cache.store("cpu", "another.key", kHash, kBuilt);
    CHECK_FALSE(fs::exists(crashed));
    CHECK(fs::exists(live));
  }
  SECTION("clear removes it, and a live writer's file only when older than 10 minutes") {
    cache.clear();
    CHECK_FALSE(fs::exists(crashed));
    CHECK(fs::exists(live));
    set_age(live, 11 * 60);
    cache.clear();
    CHECK_FALSE(fs::exists(live));
  }
}

TEST_CASE("a fresh temp file of a dead writer is kept for a short grace period", "[cache][faults]") {
  // A writer in another pid namespace looks dead; its file lives only milliseconds.
  ejk::test::TempDir dir;
  DiskCache cache(dir.path() / "v1");
  cache.store("cpu", kKey, kHash, kBuilt);
  fs::path temp = cache.entry_path("cpu", kKey, kHash);
  temp += ".tmp." + std::to_string(dead_pid()) + ".0123456789abcdef";
  std::ofstream(temp) << "x";
  cache.clear();
  CHECK(fs::exists(temp));
}
