// check_payload: what a cache entry with a valid checksum must still be before it is loaded: an
// object for this machine that defines the kernel, runs nothing at load time and needs only
// symbols this process has, or a cubin with the kernel. Then the same through get_or_build and
// list(verify): a planted or broken entry is refused, removed and rebuilt.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "cache/disk_cache.h"
#include "cache/get_or_build.h"
#include "cache/payload_check.h"
#include "elf_builder.h"
#include "test_support.h"

namespace fs = std::filesystem;
using Catch::Matchers::ContainsSubstring;
using ejk::cache::check_payload;
using ejk::test::build_elf;
using ejk::test::ElfSection;
using ejk::test::ElfSpec;

namespace {

const std::string kKey = "flash_fwd.cpu.avx512.f32.d64.bq64.bk64";
const std::string kSymbol = "ejk_flash_fwd_cpu_avx512_f32_d64_bq64_bk64";
const std::string kHash = "0123456789abcdef0123456789abcdef";

std::string problem_of(std::string_view backend, const std::vector<uint8_t>& bytes,
                       const std::string& symbol = kSymbol) {
  return check_payload(backend, symbol, bytes).value_or("");
}

ElfSpec cpu_spec() {
  ElfSpec spec;
  spec.symbols = {{kSymbol}};
  return spec;
}

ElfSpec cubin_spec(bool with_text_section, bool with_symbol) {
  ElfSpec spec;
  spec.type = 2;
  spec.machine = 190;
  spec.sections = {ElfSection{with_text_section ? ".text." + kSymbol : ".text.other"}};
  if (with_symbol) spec.symbols = {{kSymbol}};
  return spec;
}

ejk::cache::PayloadCheck cpu_check() {
  return [](std::span<const uint8_t> b) { return check_payload("cpu", kSymbol, b); };
}

}  // namespace

TEST_CASE("payload: symbol names follow the runtime's", "[cache][payload]") {
  CHECK(ejk::cache::symbol_for_key(kKey) == kSymbol);
}

TEST_CASE("payload: a CPU object defining the kernel is accepted", "[cache][payload]") {
  CHECK(problem_of("cpu", build_elf(cpu_spec())).empty());
  ElfSpec weak = cpu_spec();
  weak.symbols[0].binding = 2;
  CHECK(problem_of("cpu", build_elf(weak)).empty());
  // Backends without a known payload format are not checked.
  CHECK(problem_of("test", {1, 2, 3}).empty());
}

TEST_CASE("payload: CPU objects that could run code at load time are refused", "[cache][payload]") {
  for (const char* name : {".init_array", ".init_array.00100", ".ctors", ".ctors.65535",
                           ".preinit_array", ".init", ".fini_array", ".dtors", ".fini"}) {
    CAPTURE(name);
    ElfSpec spec = cpu_spec();
    spec.sections.push_back(ElfSection{name, 1, 0x3, std::vector<uint8_t>(8, 0)});
    CHECK_THAT(problem_of("cpu", build_elf(spec)), ContainsSubstring("run code at load time"));
  }
  // The section type alone (SHT_INIT_ARRAY under an innocent name) is enough.
  ElfSpec typed = cpu_spec();
  typed.sections.push_back(ElfSection{".data.rel", 14, 0x3, std::vector<uint8_t>(8, 0)});
  CHECK_THAT(problem_of("cpu", build_elf(typed)), ContainsSubstring("run code at load time"));
}

TEST_CASE("payload: CPU objects without the kernel, or not objects, are refused", "[cache][payload]") {
  CHECK_THAT(problem_of("cpu", build_elf(cpu_spec()), "ejk_other"), ContainsSubstring("does not define"));
  ElfSpec local = cpu_spec();
  local.symbols[0].binding = 0;
  CHECK_THAT(problem_of("cpu", build_elf(local)), ContainsSubstring("does not define"));
  ElfSpec undefined = cpu_spec();
  undefined.symbols[0].section = 0;
  CHECK_THAT(problem_of("cpu", build_elf(undefined)), ContainsSubstring("does not define"));
  ElfSpec data = cpu_spec();
  data.sections[0].flags = 0x3;  // the symbol sits in writable data, not code
  CHECK_THAT(problem_of("cpu", build_elf(data)), ContainsSubstring("does not define"));
  ElfSpec exec = cpu_spec();
  exec.type = 3;  // ET_DYN
  CHECK_THAT(problem_of("cpu", build_elf(exec)), ContainsSubstring("not a relocatable object"));
  ElfSpec arm = cpu_spec();
  arm.machine = 40;
  CHECK_THAT(problem_of("cpu", build_elf(arm)), ContainsSubstring("not this CPU's"));
  CHECK_THAT(problem_of("cpu", {'#', '!', '/', 'b', 'i', 'n'}), ContainsSubstring("not an ELF file"));
  CHECK_THAT(problem_of("cpu", build_elf(cubin_spec(true, true))), ContainsSubstring("ELF type"));
}

TEST_CASE("payload: CPU objects needing a symbol this process lacks do not link and are refused", "[cache][payload]") {
  ElfSpec uses_libc = cpu_spec();
  uses_libc.symbols.push_back({"memset", 1, 0});
  CHECK(problem_of("cpu", build_elf(uses_libc)).empty());
  ElfSpec weak_missing = cpu_spec();
  weak_missing.symbols.push_back({"ejk_no_such_function_anywhere", 2, 0});
  CHECK(problem_of("cpu", build_elf(weak_missing)).empty());
  ElfSpec missing = cpu_spec();
  missing.symbols.push_back({"ejk_no_such_function_anywhere", 1, 0});
  CHECK_THAT(problem_of("cpu", build_elf(missing)),
             ContainsSubstring("does not link: it needs 'ejk_no_such_function_anywhere'"));
}

TEST_CASE("payload: cubins need the kernel's section or symbol", "[cache][payload]") {
  CHECK(problem_of("cuda", build_elf(cubin_spec(true, false))).empty());
  CHECK(problem_of("cuda", build_elf(cubin_spec(false, true))).empty());
  CHECK_THAT(problem_of("cuda", build_elf(cubin_spec(false, false))), ContainsSubstring("has no kernel"));
  CHECK_THAT(problem_of("cuda", build_elf(cpu_spec())), ContainsSubstring("not a CUDA cubin"));
}

TEST_CASE("payload: every truncation and every corrupted offset is refused, not read past", "[cache][payload]") {
  const std::vector<uint8_t> whole = build_elf(cpu_spec());
  for (size_t n = 0; n < whole.size(); ++n) {
    std::vector<uint8_t> cut(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(n));
    CAPTURE(n);
    CHECK_FALSE(problem_of("cpu", cut).empty());
  }
  // Every byte of the header and section table set to 0xff in turn: never a crash (ASan
  // watches the reads), and a damaged table is never accepted as some other object.
  const size_t table = whole.size() - 64 * size_t{whole[60]};
  for (size_t at = 0; at < whole.size(); ++at) {
    if (at >= 64 && at < table) continue;  // contents, not structure
    std::vector<uint8_t> bad = whole;
    bad[at] = 0xff;
    CAPTURE(at);
    (void)check_payload("cpu", kSymbol, bad);
    (void)check_payload("cuda", kSymbol, bad);
  }
}

TEST_CASE("payload: a planted entry with a valid checksum is removed and rebuilt", "[cache][payload][get_or_build]") {
  ejk::test::TempDir dir;
  ejk::cache::DiskCache cache(dir.path() / "v1");
  const std::vector<uint8_t> good = build_elf(cpu_spec());
  std::vector<uint8_t> planted;
  std::string why;
  SECTION("static constructor") {
    ElfSpec spec = cpu_spec();
    spec.sections.push_back(ElfSection{".init_array", 14, 0x3, std::vector<uint8_t>(8, 0)});
    planted = build_elf(spec);
    why = "run code at load time";
  }
  SECTION("wrong symbol") {
    planted = ejk::test::cpu_object("ejk_something_else");
    why = "does not define";
  }
  SECTION("not an object at all") {
    planted = {'n', 'o', 't', ' ', 'e', 'l', 'f'};
    why = "not an ELF file";
  }
  cache.store("cpu", kKey, kHash, planted);  // a checksum that matches: only the check can tell
  auto verified = cache.list(true);
  REQUIRE(verified.size() == 1);
  CHECK_FALSE(verified[0].valid);
  CHECK_THAT(verified[0].problem, ContainsSubstring(why));
  CHECK(cache.list(false)[0].valid);  // headers alone cannot tell

  int builds = 0;
  auto build = [&] {
    ++builds;
    return good;
  };
  ejk::test::StderrCapture err;
  auto result = ejk::cache::get_or_build(cache, "cpu", kKey, kHash, build, cpu_check());
  CHECK(result.source == ejk::cache::Source::Jit);
  CHECK(result.bytes == good);
  CHECK_THAT(err.text(), ContainsSubstring("removed a bad cache entry") && ContainsSubstring(why));
  auto again = ejk::cache::get_or_build(cache, "cpu", kKey, kHash, build, cpu_check());
  CHECK(again.source == ejk::cache::Source::Cache);
  CHECK(builds == 1);
  CHECK(cache.list(true)[0].valid);
}

TEST_CASE("payload: remove_entry drops an entry that failed to load", "[cache][payload]") {
  ejk::test::TempDir dir;
  ejk::cache::DiskCache cache(dir.path() / "v1");
  cache.store("cpu", kKey, kHash, build_elf(cpu_spec()));
  CHECK(cache.remove_entry("cpu", kKey, kHash));
  CHECK_FALSE(cache.load("cpu", kKey, kHash).has_value());
  CHECK_FALSE(cache.remove_entry("cpu", kKey, kHash));
}

#ifdef EJK_FUZZ_CORPUS
TEST_CASE("payload: real compiler output passes (the fuzz seeds: clang object, nvcc cubin)", "[cache][payload]") {
  const fs::path seeds = fs::path(EJK_FUZZ_CORPUS) / "payload_check";
  CHECK(problem_of("cpu", ejk::test::read_bytes(seeds / "clang_object.o"), "ejk_k").empty());
  CHECK(problem_of("cuda", ejk::test::read_bytes(seeds / "nvcc_sm90a.cubin"), "ejk_k").empty());
}
#endif
