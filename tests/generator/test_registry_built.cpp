// The registry as built into ejk_generated: its embedded files are the files on disk, its CPU
// table holds exactly the variants the build selected, and objects built for different CPU
// targets share no weak symbol.
#include <catch2/catch_test_macros.hpp>

#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "ejk/core/registry_data.h"
#include "files.h"
#include "generate.h"
#include "registry_build_config.h"
#include "test_support.h"
#include "version.h"

namespace gen = ejk::generated;
namespace fs = std::filesystem;

TEST_CASE("built registry: embedded specs, templates and kernel headers match the sources", "[registry]") {
  const fs::path root = ejk::test::source_root();
  std::set<std::string> spec_paths, header_paths;
  for (size_t i = 0; i < gen::kNumSpecs; ++i) {
    INFO(gen::kSpecs[i].path);
    CHECK(std::string(gen::kSpecs[i].text, gen::kSpecs[i].size) == ejk::gen::read_file(root / gen::kSpecs[i].path));
    spec_paths.insert(gen::kSpecs[i].path);
  }
  CHECK(spec_paths.count("specs/flash_attention.yaml") == 1);
  for (size_t i = 0; i < gen::kNumTemplates; ++i) {
    INFO(gen::kTemplates[i].path);
    CHECK(std::string(gen::kTemplates[i].text, gen::kTemplates[i].size) ==
          ejk::gen::read_file(root / gen::kTemplates[i].path));
  }
  for (size_t i = 0; i < gen::kNumKernelHeaders; ++i) {
    INFO(gen::kKernelHeaders[i].path);
    CHECK(std::string(gen::kKernelHeaders[i].text, gen::kKernelHeaders[i].size) ==
          ejk::gen::read_file(root / "kernels" / gen::kKernelHeaders[i].path));
    header_paths.insert(gen::kKernelHeaders[i].path);
  }
  const auto on_disk = ejk::gen::list_files(root / "kernels", true);
  CHECK(header_paths == std::set<std::string>(on_disk.begin(), on_disk.end()));
  CHECK(std::string(gen::kGeneratorVersion) == ejk::gen::kVersion);
}

TEST_CASE("built registry: the CPU table is the selected AOT set", "[registry]") {
  ejk::gen::Selection sel;
  sel.backends = {"cpu"};
  sel.variants = kBuildVariants;
  std::set<std::string> expected;
  for (const auto& v : ejk::gen::plan_variants(ejk::gen::load_specs(ejk::test::source_root() / "specs"), sel, "out"))
    expected.insert(v.name);
  std::set<std::string> listed;
  for (size_t i = 0; i < gen::kNumCpuAot; ++i) {
    INFO(gen::kCpuAot[i].key);
    CHECK(gen::kCpuAot[i].fn != nullptr);
    listed.insert(gen::kCpuAot[i].key);
  }
  CHECK(listed.size() == gen::kNumCpuAot);
  CHECK(listed == expected);
}

// Every CUDA target the build has flash keys for has the bias copy built in too
// (specs/flash_fwd_bias_rows.yaml): otherwise each launch with a bias the kernel cannot read in
// place would wait for an NVRTC compile. Unless the build's EJK_VARIANTS leaves the copy out.
TEST_CASE("built registry: the bias copy is built in for every CUDA target of the flash keys", "[registry]") {
  const std::string flash = "flash_fwd.cuda.";  // flash_fwd.cuda.<target>.…
  std::set<std::string> listed, targets;
  for (size_t i = 0; i < gen::kNumCudaAot; ++i) {
    const std::string key = gen::kCudaAot[i].key;
    listed.insert(key);
    if (key.rfind(flash, 0) == 0)
      targets.insert(key.substr(flash.size(), key.find('.', flash.size()) - flash.size()));
  }
  const std::string variants = kBuildVariants;  // the generator's --variants: searched, empty = all
  const std::regex selected(variants.empty() ? ".*" : variants);
  for (const std::string& t : targets) {
    const std::string copy = "flash_fwd_bias_rows.cuda." + t + ".b16";
    if (!std::regex_search(copy, selected)) continue;
    INFO(copy);
    CHECK(listed.count(copy) == 1);
  }
}

// Objects of different targets are compiled with different -march flags. A weak (COMDAT)
// symbol defined by two of them, such as a kernel template instantiated on a type with
// external linkage, is merged by the linker into ONE copy: the other target's entry point then
// runs code built for the wrong instruction set (slower, or SIGILL on a host without it).
TEST_CASE("built registry: CPU objects of different targets share no weak symbol", "[registry]") {
  const auto nm = ejk::test::run_command(fmt::format("nm -A --defined-only '{}'", EJK_GENERATED_LIB));
  REQUIRE(nm.exit_code == 0);
  std::map<std::string, std::set<std::string>> targets_of;  // weak symbol -> targets defining it
  std::istringstream lines(nm.output);
  std::string line;
  while (std::getline(lines, line)) {
    // "libejk_generated.a:flash_fwd.cpu.avx2.f32.d64.bq64.bk64.cpp.o:0000000000000000 W _ZN..."
    std::istringstream fields(line);
    std::string where, type, symbol;
    if (!(fields >> where >> type >> symbol)) continue;
    const size_t first = where.find(':'), last = where.rfind(':');
    if (first == std::string::npos || first == last) continue;
    const std::string object = where.substr(first + 1, last - first - 1);
    const size_t cpu = object.find(".cpu.");
    if (cpu == std::string::npos || (type != "W" && type != "V" && type != "u")) continue;
    const size_t begin = cpu + 5, end = object.find('.', begin);
    targets_of[symbol].insert(object.substr(begin, end - begin));
  }
  for (const auto& [symbol, targets] : targets_of) {
    INFO(symbol << " is defined by objects of " << targets.size() << " targets");
    CHECK(targets.size() == 1);
  }
}
