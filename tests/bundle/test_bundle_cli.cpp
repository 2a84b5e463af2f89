// Bundles end to end through the `ejk` binary: build a bundle of CPU variants outside the AOT
// sets, run each from it in a fresh process with EJK_DISABLE_JIT=1; damage it (header, manifest,
// payload, truncation, a newer format, a stale or unloadable entry) and check that each is
// refused with its own message while the rest of the bundle still serves; EJK_BUNDLE_PATH read
// strictly; a CUDA bundle built for sm_90a without a GPU.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "bundle/reader.h"
#include "bundle/writer.h"
#include "../cli/cli_shell.h"

namespace fs = std::filesystem;
using Catch::Matchers::ContainsSubstring;

namespace {

const std::string kEjk = EJK_CLI_PATH;

using ejk::test::Proc;

Proc sh(const std::string& cmd) { return ejk::test::shell(cmd); }

nlohmann::json last_json(const Proc& p) {
  INFO(p.out);
  const size_t at = p.out.rfind("\n{") == std::string::npos ? p.out.find('{') : p.out.rfind("\n{") + 1;
  REQUIRE(at != std::string::npos);
  return nlohmann::json::parse(p.out.substr(at));
}

std::vector<uint8_t> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_file(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

// Problems whose variants lie outside every spec's AOT set (head_dim 80 and 96, a window), so
// only a bundle (or the JIT) can serve them whatever EJK_VARIANTS the library was built with.
const std::vector<std::string> kCases = {
    "run flash_attention --b 1 --sq 37 --sk 37 --hq 2 --hkv 2 --d 80 --causal",
    "run flash_attention --b 1 --sq 29 --sk 41 --hq 4 --hkv 2 --d 80 --dtype bf16 --window 8,0",
    "run flash_attention --b 2 --sq 17 --sk 17 --hq 2 --hkv 1 --d 96 --softcap 20"};

// One bundle of kCases' variants, built once: its keys in kCases' order.
struct Fixture {
  fs::path dir, bundle;
  std::vector<std::string> keys;
  std::string scratch_env;  // a cache the builds may fill
  Fixture() {
    dir = fs::temp_directory_path() / fmt::format("ejk-bundle-cli-{}", getpid());
    fs::remove_all(dir);
    fs::create_directories(dir);
    scratch_env = "EJK_CACHE_DIR=" + (dir / "scratch-cache").string();
    fs::create_directories(dir / "bundles");
    bundle = dir / "bundles" / "test.ejkb";
    std::string key_args;
    for (const std::string& c : kCases) {
      const nlohmann::json j = last_json(sh(scratch_env + " " + kEjk + " " + c + " --iters 1 --json"));
      keys.push_back(j["key"]);
      key_args += " --key " + keys.back();
    }
    const Proc built = sh(scratch_env + " " + kEjk + " bundle build --out " + bundle.string() + key_args);
    INFO(built.out);
    REQUIRE(built.status == 0);
  }
  ~Fixture() { fs::remove_all(dir); }
  static Fixture& get() {
    static Fixture f;
    return f;
  }
  // A copy of the bundle to damage.
  fs::path copy(const std::string& name) const {
    const fs::path p = dir / name;
    fs::copy_file(bundle, p, fs::copy_options::overwrite_existing);
    return p;
  }
  size_t index_of(const fs::path& file, const std::string& key) const {
    ejk::bundle::Reader r(ejk::bundle::FileSource::open(file), file.string());
    for (size_t i = 0; i < r.slots().size(); ++i)
      if (r.slots()[i].record && r.slots()[i].record->meta.key == key) return i;
    FAIL("no entry " << key);
    return 0;
  }
};

// Runs case i in a fresh process with an empty cache, JIT off unless asked, and the bundles.
Proc run_case(size_t i, const std::string& bundle_path, bool jit = false) {
  const fs::path empty = Fixture::get().dir / fmt::format("empty-cache-{}", i);
  fs::remove_all(empty);
  return sh(fmt::format("EJK_CACHE_DIR={} EJK_DISABLE_JIT={} EJK_BUNDLE_PATH={} {} {} --iters 1 --check --json",
                        empty.string(), jit ? 0 : 1, bundle_path, kEjk, kCases[i]));
}

void require_from_bundle(size_t i, const std::string& bundle_path) {
  const Proc p = run_case(i, bundle_path);
  INFO(p.out);
  REQUIRE(p.status == 0);
  const nlohmann::json j = last_json(p);
  CHECK(j["key"] == Fixture::get().keys[i]);
  CHECK(j["source"] == "bundle");
  CHECK(j["check"] == "pass");
}

void flip(const fs::path& file, uint64_t at) {
  std::vector<uint8_t> b = read_file(file);
  REQUIRE(at < b.size());
  b[at] ^= 0x01;
  write_file(file, b);
}

}  // namespace

TEST_CASE("variants built into a bundle run from it with EJK_DISABLE_JIT=1 and pass the reference", "[bundle][cli]") {
  const Fixture& f = Fixture::get();
  for (size_t i = 0; i < kCases.size(); ++i) require_from_bundle(i, f.bundle.string());
  require_from_bundle(0, (f.dir / "bundles").string());  // a directory of bundles
  const Proc verify = sh(kEjk + " bundle verify " + f.bundle.string());
  INFO(verify.out);
  CHECK(verify.status == 0);
  CHECK_THAT(verify.out, ContainsSubstring("3 of 3 entries valid"));
  const Proc extract = sh(kEjk + " bundle extract " + f.bundle.string() + " --out " + (f.dir / "x").string());
  CHECK(extract.status == 0);
  for (const std::string& k : f.keys) CHECK(fs::file_size(f.dir / "x" / (k + ".o")) > 0);
}

TEST_CASE("a damaged payload or record rejects only its entry; the others still load", "[bundle][cli][corruption]") {
  const Fixture& f = Fixture::get();
  const fs::path file = f.copy("damaged-entry.ejkb");
  const size_t bad = f.index_of(file, f.keys[1]);
  ejk::bundle::Record rec;
  {
    ejk::bundle::Reader r(ejk::bundle::FileSource::open(file), file.string());
    rec = *r.slots()[bad].record;
  }
  std::string expected;
  SECTION("payload") {
    flip(file, rec.payload_offset + rec.stored_size / 2);
    expected = "payload: checksum";
  }
  SECTION("manifest record") {
    const std::vector<uint8_t> b = read_file(file);
    flip(file, ejk::bundle::kHeaderSize + ejk::bundle::get_u64(b, ejk::bundle::kHeaderSize + bad * 16) + 70);
    expected = "record checksum";
  }
  const Proc verify = sh(kEjk + " bundle verify " + file.string());
  INFO(verify.out);
  CHECK(verify.status == 1);
  CHECK_THAT(verify.out, ContainsSubstring(expected) && ContainsSubstring("2 of 3 entries valid"));
  for (size_t i : {size_t(0), size_t(2)}) require_from_bundle(i, file.string());
  const Proc refused = run_case(1, file.string());
  CHECK(refused.status != 0);  // never run from the bundle, and the JIT is off
  CHECK_THAT(refused.out, ContainsSubstring(expected) && ContainsSubstring("not used") &&
                              ContainsSubstring("EJK_DISABLE_JIT"));
  const Proc rebuilt = run_case(1, file.string(), /*jit=*/true);
  INFO(rebuilt.out);
  REQUIRE(rebuilt.status == 0);
  CHECK(last_json(rebuilt)["source"] == "jit");
}

TEST_CASE("header damage, truncation and a newer format are each refused with their own message", "[bundle][cli][corruption]") {
  const Fixture& f = Fixture::get();
  const fs::path file = f.copy("damaged-file.ejkb");
  std::string expected;
  SECTION("header") {
    flip(file, 50);  // the file size field
    expected = "header: checksum";
  }
  SECTION("newer format version") {
    std::vector<uint8_t> b = read_file(file);
    b[8] = 2;
    write_file(file, b);
    expected = "format version 2 is newer than this library reads (version 1)";
  }
  const Proc verify = sh(kEjk + " bundle verify " + file.string());
  INFO(verify.out);
  CHECK(verify.status != 0);
  CHECK_THAT(verify.out, ContainsSubstring(expected));
  const Proc run = run_case(0, file.string());
  CHECK(run.status != 0);
  CHECK_THAT(run.out, ContainsSubstring(expected) && ContainsSubstring("not used"));
}

TEST_CASE("a truncated bundle keeps the entries before the cut", "[bundle][cli][corruption]") {
  const Fixture& f = Fixture::get();
  const fs::path file = f.copy("truncated.ejkb");
  std::vector<uint8_t> b = read_file(file);
  b.resize(b.size() - 100);  // into the last payload
  write_file(file, b);
  const Proc verify = sh(kEjk + " bundle verify " + file.string());
  INFO(verify.out);
  CHECK(verify.status == 1);
  CHECK_THAT(verify.out, ContainsSubstring("truncated") && ContainsSubstring("2 of 3 entries valid"));
  size_t served = 0;
  for (size_t i = 0; i < kCases.size(); ++i) {
    const Proc p = run_case(i, file.string());
    if (p.status == 0 && last_json(p)["source"] == "bundle") ++served;
  }
  CHECK(served == 2);
}

TEST_CASE("a stale entry and one the payload check refuses are skipped, each with a note", "[bundle][cli]") {
  const Fixture& f = Fixture::get();
  const fs::path file = f.dir / "rewritten.ejkb";
  std::vector<ejk::bundle::Entry> entries;
  {
    ejk::bundle::Reader r(ejk::bundle::FileSource::open(f.bundle), f.bundle.string());
    for (size_t i = 0; i < r.slots().size(); ++i) {
      ejk::bundle::EntryMeta m = r.slots()[i].record->meta;
      std::vector<uint8_t> bytes = r.read(i).bytes;
      if (m.key == f.keys[0]) m.content_hash = std::string(32, 'a');  // built from other sources
      if (m.key == f.keys[1]) bytes.assign(4000, 0x90);               // intact, but not an object
      entries.push_back(ejk::bundle::make_entry(m, bytes));
    }
  }
  write_file(file, ejk::bundle::encode_bundle(std::move(entries), "0.1.0"));
  const Proc stale = run_case(0, file.string());
  CHECK(stale.status != 0);
  CHECK_THAT(stale.out, ContainsSubstring("is stale here") && ContainsSubstring(f.keys[0]));
  const Proc refused = run_case(1, file.string());
  CHECK(refused.status != 0);
  CHECK_THAT(refused.out, ContainsSubstring("payload: ") && ContainsSubstring(f.keys[1]));
  require_from_bundle(2, file.string());
  // A later bundle with a current entry serves the key the first one could not.
  require_from_bundle(0, file.string() + ":" + f.bundle.string());
  const Proc verify = sh(kEjk + " bundle verify " + file.string());
  CHECK(verify.status == 1);
  CHECK_THAT(verify.out, ContainsSubstring("stale for this library"));
}

TEST_CASE("EJK_BUNDLE_PATH is read strictly", "[bundle][cli]") {
  const Fixture& f = Fixture::get();
  for (const std::string& value : {f.bundle.string() + "::" + f.bundle.string(), std::string(":"),
                                   (f.dir / "missing.ejkb").string()}) {
    const Proc p = run_case(0, value);
    INFO(p.out);
    CHECK(p.status != 0);
    CHECK_THAT(p.out, ContainsSubstring("EJK_BUNDLE_PATH=\"" + value + "\""));
  }
  // Also for a call that a built-in variant serves (read when the plan is made).
  const Proc aot = sh("EJK_BUNDLE_PATH=: " + kEjk + " run merge_attention_states --t 8 --h 2 --d 64 --iters 1");
  CHECK(aot.status != 0);
  CHECK_THAT(aot.out, ContainsSubstring("element 1 is empty"));
}

TEST_CASE("bundle build explains what it cannot do", "[bundle][cli]") {
  const Fixture& f = Fixture::get();
  const std::string out = " --out " + (f.dir / "never.ejkb").string();
  const std::map<std::string, std::string> cases = {
      {"--variants .", "needs --arch"},  // with --backend cuda below
      {"--variants 'no-such-key'", "no cpu key of the specs' AOT sets matches"},
      {"--variants '('", "is not a valid pattern: unmatched '('"},
      {"--variants '(.*)*X'", "no cpu key of the specs' AOT sets matches"},  // std::regex backtracked for minutes
      {"--variants . --arch avx9", "not a CPU target"},
      {"--key flash_fwd.cuda.sm80.bf16.d64.bq128.bk64", "a cuda key, and --backend is cpu"},
      {"", "expected --variants REGEX"}};
  for (const auto& [args, message] : cases) {
    const std::string backend = message == "needs --arch" ? " --backend cuda" : "";
    const Proc p = sh(kEjk + " bundle build" + out + backend + " " + args);
    INFO(args << "\n" << p.out);
    CHECK(p.status == 2);
    CHECK_THAT(p.out, ContainsSubstring(message));
  }
  CHECK_FALSE(fs::exists(f.dir / "never.ejkb"));
}

#if EJK_TEST_CUDA
TEST_CASE("a CUDA bundle for sm_90a builds without a GPU, then lists and verifies", "[bundle][cli][cuda]") {
  const Fixture& f = Fixture::get();
  const fs::path file = f.dir / "sm90a.ejkb";
  const Proc built = sh(f.scratch_env + " " + kEjk + " bundle build --backend cuda --arch sm_90a --variants "
                        "'merge_states.*bf16|bias_rows' --out " + file.string());
  if (built.status != 0 && built.out.find("NVRTC") != std::string::npos) SKIP(built.out);
  INFO(built.out);
  REQUIRE(built.status == 0);
  const nlohmann::json ls = last_json(sh(kEjk + " bundle ls --json " + file.string()));
  std::map<std::string, std::string> arch_of;
  for (const auto& e : ls["entries"]) arch_of[e["key"]] = e["arch"];
  CHECK(arch_of == std::map<std::string, std::string>{{"flash_fwd_bias_rows.cuda.sm90a.b16", "sm_90a"},
                                                      {"merge_states.cuda.sm90a.bf16", "sm_90a"}});
  const Proc verify = sh(kEjk + " bundle verify " + file.string());
  INFO(verify.out);
  CHECK(verify.status == 0);
  CHECK_THAT(verify.out, ContainsSubstring("2 of 2 entries valid"));
}
#endif
