#include "plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <regex>

#include "ejk/core/error.h"
#include "files.h"

namespace ejk::gen {
namespace {

std::regex compile_filter(const std::string& pattern) {
  try {
    return std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    throw InvalidArgument(fmt::format("--variants '{}' is not a valid regular expression: {}", pattern, e.what()));
  }
}

void check_selection(const std::vector<SpecFile>& specs, const Selection& sel) {
  auto known_backend = [&](const std::string& b) {
    return std::any_of(specs.begin(), specs.end(), [&](const SpecFile& s) { return s.schema.has_backend(b); });
  };
  for (const std::string& b : sel.backends)
    if (!known_backend(b)) throw InvalidArgument(fmt::format("--backends: no spec has a backend '{}'", b));
  for (const auto& [b, targets] : sel.targets) {
    if (!known_backend(b)) throw InvalidArgument(fmt::format("--targets: no spec has a backend '{}'", b));
    for (const std::string& t : targets) {
      const bool known = std::any_of(specs.begin(), specs.end(), [&](const SpecFile& s) {
        return s.schema.has_backend(b) && s.schema.backend(b).find_target(t);
      });
      if (!known) throw InvalidArgument(fmt::format("--targets: backend '{}' has no target '{}'", b, t));
    }
  }
}

}  // namespace

std::vector<SpecFile> load_specs(const fs::path& dir) {
  std::vector<SpecFile> specs;
  for (const std::string& name : list_files(dir, false)) {
    if (fs::path(name).extension() != ".yaml") continue;
    std::string text = read_file(dir / name);
    OpSchema schema = OpSchema::parse(text, (dir / name).string());
    for (const SpecFile& s : specs)
      if (s.schema.op() == schema.op())
        throw SpecError(fmt::format("{}:1: op: '{}' is also the op of {}", (dir / name).string(),
                                    schema.op(), s.name));
    specs.push_back({name, std::move(text), std::move(schema)});
  }
  if (specs.empty()) throw InvalidArgument(fmt::format("no *.yaml spec in '{}'", dir.string()));
  return specs;
}

std::vector<PlannedVariant> plan_variants(const std::vector<SpecFile>& specs, const Selection& sel,
                                          const fs::path& out_dir) {
  check_selection(specs, sel);
  const bool filtered = !sel.variants.empty();
  const std::regex filter = compile_filter(filtered ? sel.variants : ".*");
  std::vector<PlannedVariant> out;
  for (size_t i = 0; i < specs.size(); ++i) {
    for (const std::string& backend : sel.backends) {
      if (!specs[i].schema.has_backend(backend)) continue;
      const BackendDef& b = specs[i].schema.backend(backend);
      auto targets = sel.targets.find(backend);
      for (VariantKey& key : specs[i].schema.aot_keys(backend)) {
        std::string name = to_string(key);
        if (targets != sel.targets.end() && !targets->second.count(key.target)) continue;
        if (filtered && !std::regex_search(name, filter)) continue;
        fs::path source = out_dir / backend / (name + b.source_suffix);
        out.push_back({i, std::move(key), std::move(name), std::move(source)});
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.name < y.name; });
  return out;
}

}  // namespace ejk::gen
