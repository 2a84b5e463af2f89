#include "plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "ejk/core/error.h"
#include "ejk/core/pattern.h"
#include "files.h"

namespace ejk::gen {
namespace {

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

std::vector<PlannedVariant> plan_aot_sets(const std::vector<SpecFile>& specs, const Selection& sel,
                                          const fs::path& out_dir) {
  const bool filtered = !sel.variants.empty();
  const Pattern filter(filtered ? sel.variants : "", "--variants");
  std::vector<PlannedVariant> out;
  for (size_t i = 0; i < specs.size(); ++i) {
    for (const std::string& backend : sel.backends) {
      if (!specs[i].schema.has_backend(backend)) continue;
      const BackendDef& b = specs[i].schema.backend(backend);
      auto targets = sel.targets.find(backend);
      for (VariantKey& key : specs[i].schema.aot_keys(backend)) {
        std::string name = to_string(key);
        if (targets != sel.targets.end() && !targets->second.count(key.target)) continue;
        if (filtered && !filter.search(name)) continue;
        fs::path source = out_dir / backend / (name + b.source_suffix);
        out.push_back({i, std::move(key), std::move(name), std::move(source)});
      }
    }
  }
  return out;
}

// An explicit key, parsed and validated by its op's spec as the runtime would.
PlannedVariant plan_key(const std::vector<SpecFile>& specs, const Selection& sel, const std::string& name,
                        const fs::path& out_dir) {
  const std::string op = name.substr(0, name.find('.'));
  const auto spec = std::find_if(specs.begin(), specs.end(), [&](const SpecFile& s) { return s.schema.op() == op; });
  if (spec == specs.end()) throw InvalidArgument(fmt::format("--keys '{}': no spec defines op '{}'", name, op));
  VariantKey key = spec->schema.parse_key(name);
  spec->schema.validate(key);
  if (std::find(sel.backends.begin(), sel.backends.end(), key.backend) == sel.backends.end())
    throw InvalidArgument(fmt::format("--keys '{}': backend '{}' is not among --backends", name, key.backend));
  const auto targets = sel.targets.find(key.backend);
  if (targets != sel.targets.end() && !targets->second.count(key.target))
    throw InvalidArgument(fmt::format("--keys '{}': target '{}' is not among --targets", name, key.target));
  const BackendDef& b = spec->schema.backend(key.backend);
  fs::path source = out_dir / key.backend / (name + b.source_suffix);
  return {static_cast<size_t>(spec - specs.begin()), std::move(key), name, std::move(source)};
}

}  // namespace

std::vector<SpecFile> load_specs(const fs::path& dir) {
  std::vector<SpecFile> specs;
  const std::string table_name(TargetTable::kFileName);
  std::optional<TargetTable> table;
  if (fs::is_regular_file(dir / table_name))
    table = TargetTable::parse(read_file(dir / table_name), (dir / table_name).string());
  for (const std::string& name : list_files(dir, false)) {
    if (fs::path(name).extension() != ".yaml" || name == table_name) continue;
    std::string text = read_file(dir / name);
    OpSchema schema = OpSchema::parse(text, (dir / name).string(), table ? &*table : nullptr);
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
  if (!sel.keys.empty() && !sel.variants.empty())
    throw InvalidArgument("--keys and --variants exclude each other: name the keys, or filter the AOT sets");
  std::vector<PlannedVariant> out;
  if (sel.keys.empty()) out = plan_aot_sets(specs, sel, out_dir);
  for (const std::string& name : sel.keys) out.push_back(plan_key(specs, sel, name, out_dir));
  std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.name < y.name; });
  out.erase(std::unique(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.name == y.name; }),
            out.end());
  return out;
}

}  // namespace ejk::gen
