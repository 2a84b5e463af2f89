// What one generator run produces: the specs it read and the variants it selected, each with
// its output path. Listing outputs (for CMake), writing sources and writing the registry all
// start from the same plan, so they cannot disagree about the variant set.
#pragma once
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ejk/core/schema.h"
#include "ejk/core/variant_key.h"

namespace ejk::gen {

namespace fs = std::filesystem;

struct SpecFile {
  std::string name;  // file name inside the specs directory, e.g. "flash_attention.yaml"
  std::string text;
  OpSchema schema;
};

// Every *.yaml file of `dir`, sorted by name, parsed and validated (SpecError on a bad spec).
// Two specs may not define the same op.
std::vector<SpecFile> load_specs(const fs::path& dir);

// Which variants to produce: the specs' AOT sets, filtered, or exact keys.
struct Selection {
  std::string variants;               // regex searched in the canonical key; empty: all
  // Exact keys instead of the AOT sets: any key the op's spec accepts (the JIT's range), e.g. a
  // head_dim a program needs that the library does not pre-build. Not with `variants`.
  std::vector<std::string> keys;
  std::vector<std::string> backends;  // backends to generate for (each must be in some spec)
  std::map<std::string, std::set<std::string>> targets;  // backend -> targets kept; absent: all
};

struct PlannedVariant {
  size_t spec = 0;     // index into the specs
  VariantKey key;
  std::string name;    // to_string(key)
  fs::path source;     // <out>/<backend>/<name><suffix>
};

// The selected keys, sorted by name. InvalidArgument for an unknown backend or target, a
// --variants value that is not a regex, or an explicit key its spec rejects.
std::vector<PlannedVariant> plan_variants(const std::vector<SpecFile>& specs, const Selection& sel,
                                          const fs::path& out_dir);

}  // namespace ejk::gen
