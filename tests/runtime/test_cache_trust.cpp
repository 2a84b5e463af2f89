// What the disk cache trusts (issue 36, defect 1): a root, backend directory or entry that
// another user could have written is never loaded from; the run compiles in memory instead.
// Ownership cases need root (chown, setuid) and are skipped otherwise.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "cache/disk_cache.h"
#include "cache/get_or_build.h"
#include "ejk/core/error.h"
#include "test_support.h"

namespace fs = std::filesystem;
using Catch::Matchers::ContainsSubstring;
using ejk::cache::DiskCache;
using ejk::cache::Source;
using ejk::test::StderrCapture;

namespace {

// The default root's last part: the entry format's version.
const std::string kVersionDir = "v" + std::to_string(ejk::cache::kFormatVersion);

const std::string kKey = "flash_fwd.cpu.test.d64";
const std::string kHash = "0123456789abcdef0123456789abcdef";
const std::vector<uint8_t> kPlanted = {'p', 'l', 'a', 'n', 't', 'e', 'd'};
const std::vector<uint8_t> kBuilt = {'b', 'u', 'i', 'l', 't'};

ejk::cache::Builder builder() {
  return [] { return kBuilt; };
}

// Gives the path and everything below it to `uid` (lchown: links are not followed).
void chown_tree(const fs::path& path, uid_t uid) {
  REQUIRE(::lchown(path.c_str(), uid, uid) == 0);
  if (fs::is_directory(fs::symlink_status(path)))
    for (const auto& e : fs::recursive_directory_iterator(path))
      REQUIRE(::lchown(e.path().c_str(), uid, uid) == 0);
}

mode_t mode_of(const fs::path& path) {
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

// A cache at dir/v1 holding a valid entry with the planted payload.
fs::path planted_cache(const fs::path& dir) {
  DiskCache cache(dir / "v1");
  cache.store("cpu", kKey, kHash, kPlanted);
  return dir / "v1";
}

// The run never loads the planted bytes, builds in memory, stores nothing, and says why.
void check_refused(DiskCache& cache, const std::string& why) {
  REQUIRE(cache.unusable("cpu").has_value());
  CHECK_THAT(*cache.unusable("cpu"), ContainsSubstring(why));
  StderrCapture err;
  auto first = ejk::cache::get_or_build(cache, "cpu", kKey, kHash, builder());
  auto second = ejk::cache::get_or_build(cache, "cpu", kKey, kHash, builder());
  CHECK(first.source == Source::Jit);
  CHECK(first.bytes == kBuilt);
  CHECK(second.source == Source::Jit);  // nothing was stored
  CHECK_THAT(err.text(), ContainsSubstring("not using the cache") && ContainsSubstring(why));
  // `cache verify` shows the reason and calls nothing in there valid.
  bool reported = false;
  for (const auto& e : cache.list(true)) {
    CHECK_FALSE(e.valid);
    reported = reported || e.problem.find(why) != std::string::npos;
  }
  CHECK(reported);
}

}  // namespace

TEST_CASE("a root owned by another user is refused, its entries never loaded", "[cache][trust]") {
  if (!ejk::test::is_root()) SKIP("needs root to give files to another user");
  ejk::test::TempDir dir;
  fs::path root = planted_cache(dir.path());
  chown_tree(root, ejk::test::kNobody);
  DiskCache cache(root);
  check_refused(cache, "owned by uid 65534");
  CHECK_THROWS_WITH(cache.clear(), ContainsSubstring("owned by uid 65534"));
  CHECK(fs::exists(cache.entry_path("cpu", kKey, kHash)));  // refused, not cleaned: not ours
}

TEST_CASE("a root or backend directory writable by group or others is refused", "[cache][trust]") {
  ejk::test::TempDir dir;
  fs::path root = planted_cache(dir.path());
  DiskCache cache(root);
  SECTION("group-writable root") {
    fs::permissions(root, fs::perms::group_write, fs::perm_options::add);
    check_refused(cache, "writable by its group");
  }
  SECTION("world-writable backend directory") {
    fs::permissions(root / "cpu", fs::perms::others_write, fs::perm_options::add);
    check_refused(cache, "writable by other users");
  }
  SECTION("world-writable, sticky root") {
    fs::permissions(root, fs::perms::others_write | fs::perms::sticky_bit, fs::perm_options::add);
    check_refused(cache, "writable by other users");  // others could add entries
  }
}

TEST_CASE("the root's parent and ancestors must not let others replace the root", "[cache][trust]") {
  ejk::test::TempDir dir;
  SECTION("world-writable ancestor without the sticky bit") {
    DiskCache cache(planted_cache(dir.path() / "open" / "x"));
    fs::permissions(dir.path() / "open", fs::perms::all);
    check_refused(cache, "writable by every user");
  }
  SECTION("a sticky world-writable parent, like /tmp, is fine") {
    fs::create_directories(dir.path() / "tmp");
    fs::permissions(dir.path() / "tmp", fs::perms::all | fs::perms::sticky_bit);
    DiskCache cache(dir.path() / "tmp" / "ejk" / "v1");
    CHECK_FALSE(cache.unusable("cpu").has_value());
    auto built = ejk::cache::get_or_build(cache, "cpu", kKey, kHash, builder());
    CHECK(built.source == Source::Jit);
    CHECK(ejk::cache::get_or_build(cache, "cpu", kKey, kHash, builder()).source == Source::Cache);
  }
  SECTION("a parent owned by another user") {
    if (!ejk::test::is_root()) SKIP("needs root to give files to another user");
    fs::path parent = dir.path() / "theirs";
    fs::path root = planted_cache(parent);
    REQUIRE(::lchown(parent.c_str(), ejk::test::kNobody, ejk::test::kNobody) == 0);
    DiskCache cache(root);
    check_refused(cache, "owned by uid 65534");
  }
}

TEST_CASE("directories the cache creates are not writable by others, whatever the umask", "[cache][trust]") {
  ejk::test::TempDir dir;
  mode_t old = ::umask(0);
  DiskCache cache(dir.path() / "a" / "b" / "v1");
  cache.store("cpu", kKey, kHash, kBuilt);
  ::umask(old);
  for (const fs::path& d : {dir.path() / "a", dir.path() / "a" / "b", cache.root(), cache.root() / "cpu"})
    CHECK(mode_of(d) == 0755);
  CHECK(mode_of(cache.entry_path("cpu", kKey, kHash)) == 0644);
  CHECK(cache.load("cpu", kKey, kHash) == kBuilt);
}

TEST_CASE("the $TMPDIR fallback is private (0700) and checked", "[cache][trust]") {
  ejk::test::TempDir dir;
  ejk::test::ScopedEnv a("EJK_CACHE_DIR", std::nullopt), b("XDG_CACHE_HOME", std::nullopt),
      c("HOME", std::nullopt), d("TMPDIR", dir.path().string());
  const fs::path base = dir.path() / ("ejkernel-" + std::to_string(::geteuid()));
  CHECK(ejk::cache::default_root() == base / kVersionDir);
  SECTION("created 0700 by the first store") {
    DiskCache cache;
    auto built = ejk::cache::get_or_build(cache, "cpu", kKey, kHash, builder());
    CHECK(built.source == Source::Jit);
    CHECK(mode_of(base) == 0700);
    CHECK(mode_of(base / kVersionDir) == 0700);
    CHECK(mode_of(base / kVersionDir / "cpu") == 0700);
    CHECK(ejk::cache::get_or_build(cache, "cpu", kKey, kHash, builder()).source == Source::Cache);
  }
  SECTION("pre-created by another user with a planted entry: refused") {
    if (!ejk::test::is_root()) SKIP("needs root to give files to another user");
    planted_cache(base);
    chown_tree(base, ejk::test::kNobody);
    DiskCache cache;
    check_refused(cache, "owned by uid 65534");
  }
}

TEST_CASE("entries another user could have written are removed and rebuilt", "[cache][trust]") {
  ejk::test::TempDir dir;
  DiskCache cache(planted_cache(dir.path()));
  fs::path entry = cache.entry_path("cpu", kKey, kHash);
  std::string why;
  SECTION("group-writable entry") {
    fs::permissions(entry, fs::perms::group_write, fs::perm_options::add);
    why = "writable by group or others";
  }
  SECTION("entry owned by another user") {
    if (!ejk::test::is_root()) SKIP("needs root to give files to another user");
    REQUIRE(::lchown(entry.c_str(), ejk::test::kNobody, ejk::test::kNobody) == 0);
    why = "owned by uid 65534";
  }
  auto listed = cache.list(false);
  REQUIRE(listed.size() == 1);
  CHECK_FALSE(listed[0].valid);
  CHECK_THAT(listed[0].problem, ContainsSubstring(why));
  StderrCapture err;
  auto result = ejk::cache::get_or_build(cache, "cpu", kKey, kHash, builder());
  CHECK(result.source == Source::Jit);
  CHECK(result.bytes == kBuilt);
  CHECK_THAT(err.text(), ContainsSubstring("removed a bad cache entry") && ContainsSubstring(why));
  CHECK(mode_of(entry) == 0644);
  CHECK(ejk::cache::get_or_build(cache, "cpu", kKey, kHash, builder()).source == Source::Cache);
}

TEST_CASE("a shared cache owned by root is read by other users, who store nothing", "[cache][trust]") {
  if (!ejk::test::is_root()) SKIP("needs root to run a check as another user");
  ejk::test::TempDir dir;
  fs::permissions(dir.path(), fs::perms::group_exec | fs::perms::others_exec, fs::perm_options::add);
  DiskCache(dir.path() / "v1").store("cpu", kKey, kHash, kPlanted);  // pre-warmed by root
  const fs::path root = dir.path() / "v1";
  int status = ejk::test::run_in_child([&] {
    if (::setgid(ejk::test::kNobody) != 0 || ::setuid(ejk::test::kNobody) != 0) return 10;
    DiskCache cache(root);
    if (cache.unusable("cpu")) return 11;
    if (!cache.read_only()) return 12;
    auto hit = ejk::cache::get_or_build(cache, "cpu", kKey, kHash, builder());
    if (hit.source != Source::Cache || hit.bytes != kPlanted) return 13;
    auto miss = ejk::cache::get_or_build(cache, "cpu", "other.key", kHash, builder());
    if (miss.source != Source::Jit || cache.load("cpu", "other.key", kHash)) return 14;
    return 0;
  });
  CHECK(status == 0);
}
