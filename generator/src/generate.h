// One generator run: render the selected variants' sources and the registry, writing only
// files whose content changed, or describe the outputs without writing them.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "plan.h"

namespace ejk::gen {

enum class Only { all, sources, registry };

// Which registry a run writes: the library's registry.cpp (specs, templates, kernel headers and
// the AOT tables), or a program's registration.cpp, which registers its own CPU variants with
// libejk when it loads (ejk_register_cpu_variants; CMake's ejk_generate_kernels).
enum class Registry { library, user };

struct GenerateOptions {
  fs::path specs_dir, templates_dir, kernels_dir, out_dir;
  Selection selection;
  // Directory holding <key>.cubin for every selected CUDA variant (built by nvcc from the
  // sources of an earlier `--only sources` run); unset: the CUDA table stays empty.
  std::optional<fs::path> cuda_cubins;
  // Where the public ops' typed APIs go (api.h: headers under include/, sources under src/),
  // written with the sources; unset: none.
  std::optional<fs::path> api_dir;
  Only only = Only::all;
  Registry registry = Registry::library;
};

struct GenerateResult {
  std::vector<fs::path> outputs;  // every file this run is responsible for
  size_t written = 0;             // files whose content changed
  size_t pruned = 0;              // stale generated sources removed
};

// <out>/registry.cpp or <out>/registration.cpp.
fs::path registry_path(const GenerateOptions& opt);

// The paths a run with these options writes, in a stable order (sources, then the registry).
std::vector<fs::path> list_outputs(const GenerateOptions& opt);

GenerateResult generate(const GenerateOptions& opt);

// A CMake script describing the outputs: the registry path and, per (op, backend, target)
// group, the sources and the target's compile flags from the spec. EjkGenerate.cmake includes
// it to declare the build of the generated files.
std::string cmake_manifest(const GenerateOptions& opt);

// Renders one variant from the files on disk (what `ejk-gen render KEY` prints).
std::string render_key(const std::vector<SpecFile>& specs, const fs::path& templates_dir,
                       const std::string& key);

}  // namespace ejk::gen
