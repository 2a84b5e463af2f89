// Adding an op touches only its own folders: every public op of the specs is registered with
// the library, README's op table lists exactly those ops, and the files every op used to edit
// name no op. The op names come from the specs (`op:` and `api:`), so a new op is checked too.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ejk/op.h"

namespace fs = std::filesystem;

namespace {

const fs::path kRoot = EJK_SOURCE_DIR;

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE(in.good());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct SpecNames {
  std::set<std::string> public_ops;  // `api:` of specs that are not internal
  std::set<std::string> all_names;   // every `op:` and `api:`
};

// A spec's top-level `op:`, `api:` and `internal:` lines (files without `op:` are not op specs).
SpecNames spec_names() {
  SpecNames n;
  const std::regex key(R"(^(op|api|internal):\s*([A-Za-z0-9_]+)\s*$)");
  for (const auto& e : fs::directory_iterator(kRoot / "specs")) {
    if (e.path().extension() != ".yaml") continue;
    std::istringstream in(read_text(e.path()));
    std::string line, op, api;
    bool internal = false;
    for (std::smatch m; std::getline(in, line);)
      if (std::regex_match(line, m, key)) {
        if (m[1] == "op") op = m[2];
        else if (m[1] == "api") api = m[2];
        else internal = m[2] == "true";
      }
    if (op.empty()) continue;
    n.all_names.insert(op);
    if (!api.empty()) n.all_names.insert(api);
    if (!internal) n.public_ops.insert(api.empty() ? op : api);
  }
  return n;
}

// Op names that `text` holds as whole identifiers (not as part of a longer name).
std::vector<std::string> names_in(const std::string& text, const std::set<std::string>& names) {
  auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  std::vector<std::string> found;
  for (const std::string& name : names)
    for (size_t at = text.find(name); at != std::string::npos; at = text.find(name, at + 1)) {
      const bool left = at == 0 || !ident(text[at - 1]);
      const bool right = at + name.size() == text.size() || !ident(text[at + name.size()]);
      if (left && right) {
        found.push_back(name);
        break;
      }
    }
  return found;
}

// The files an op used to edit. Enforced now: those whose op names are gone.
const std::vector<std::string> kOpFreeFiles = {
    "runtime/CMakeLists.txt",  "cli/CMakeLists.txt",     "cli/op_case.cpp",
    "cli/op_case.h",           "tests/ops/CMakeLists.txt", "scripts/device-check.sh",
    "runtime/src/engine/op_def.cpp", "runtime/include/ejk/ejk.h",
    "python/src/ejk_jax.cpp",  "python/src/ejk_torch.cpp", "python/ejk/jax.py",
    "python/ejk/torch.py",     "python/ejk/__init__.py", "python/ejk/_kit.py",
    "python/ejk/_batching.py", "python/ejk/_sharding.py", "python/ejk/_lib.py",
};

}  // namespace

TEST_CASE("every public op of the specs is registered, sorted by name") {
  const SpecNames n = spec_names();
  REQUIRE(n.public_ops.size() >= 4);
  const std::vector<std::string> ops = ejk::op_names();
  CHECK(std::is_sorted(ops.begin(), ops.end()));
  CHECK(std::set<std::string>(ops.begin(), ops.end()) == n.public_ops);
  CHECK(std::set<std::string>(ops.begin(), ops.end()).size() == ops.size());
}

TEST_CASE("the shared files an op used to edit name no op") {
  const SpecNames n = spec_names();
  REQUIRE(n.all_names.count("flash_attention") == 1);  // the scan reads the specs' names
  for (const std::string& f : kOpFreeFiles) {
    INFO(f << " names ops: these belong in the op's own folders");
    REQUIRE(fs::exists(kRoot / f));  // a renamed file would silently leave the list
    CHECK(names_in(read_text(kRoot / f), n.all_names).empty());
  }
}

TEST_CASE("the op-name scan finds whole names only") {
  const std::set<std::string> names = {"mean_pooling", "merge_states"};
  CHECK(names_in("run mean_pooling --b 1", names) == std::vector<std::string>{"mean_pooling"});
  CHECK(names_in("mean_pooling_backward merge_states_params", names).empty());
  CHECK(names_in("x(merge_states)", names) == std::vector<std::string>{"merge_states"});
}

TEST_CASE("README's op table lists exactly the public ops, each once") {
  std::istringstream in(read_text(kRoot / "README.md"));
  std::string line;
  while (std::getline(in, line) && line.rfind("| op |", 0) != 0) {
  }
  REQUIRE(line.rfind("| op |", 0) == 0);
  std::set<std::string> listed;
  const std::regex name("`([A-Za-z0-9_]+)`");
  std::getline(in, line);  // | --- | ...
  while (std::getline(in, line) && line.rfind('|', 0) == 0) {
    const std::string first = line.substr(1, line.find('|', 1) - 1);
    for (std::sregex_iterator it(first.begin(), first.end(), name), end; it != end; ++it) {
      INFO("README's op table lists " << (*it)[1] << " twice");
      CHECK(listed.insert((*it)[1]).second);
    }
  }
  CHECK(listed == spec_names().public_ops);
}
