// Shared by the CUDA tests: the spec, template and kernel headers read from the source tree,
// keys checked against the spec, and rendering a key exactly as the generator and the JIT do
// (core's render_variant).
#pragma once
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cuda/nvrtc_compiler.h"
#include "ejk/core/render_variant.h"
#include "ejk/core/schema.h"
#include "ejk/core/variant_key.h"

namespace ejk::test {

// A fresh seed per run; the tests print it so a failure can be replayed.
inline uint64_t fresh_seed() {
  std::random_device device;
  return (uint64_t{device()} << 32) ^ device();
}

// The source tree: $EJK_SOURCE_DIR when set (a test binary run from another checkout, e.g. on
// the GPU machine), else the one this binary was configured from.
inline std::string source_dir() {
  const char* env = std::getenv("EJK_SOURCE_DIR");
  return env != nullptr && *env != '\0' ? env : EJK_SOURCE_DIR;
}

inline std::string source_file(const std::string& rel) {
  std::ifstream in(source_dir() + "/" + rel);
  if (!in) throw std::runtime_error("cannot read " + rel + " under " + source_dir());
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// specs/targets.yaml: the table the specs' named targets come from.
inline const TargetTable& target_table() {
  static const TargetTable table = TargetTable::parse(source_file("specs/targets.yaml"), "specs/targets.yaml");
  return table;
}

inline const OpSchema& flash_schema() {
  static const OpSchema schema =
      OpSchema::parse(source_file("specs/flash_attention.yaml"), "specs/flash_attention.yaml", &target_table());
  return schema;
}

// The flash forward's bias copy (one kernel per arch, shared by every bias key).
inline const OpSchema& bias_rows_schema() {
  static const OpSchema schema = OpSchema::parse(source_file("specs/flash_fwd_bias_rows.yaml"),
                                                 "specs/flash_fwd_bias_rows.yaml", &target_table());
  return schema;
}

// A CUDA flash key, validated against the spec: a key the runtime could never build fails the
// test where it is made, not deep in a launch.
inline VariantKey cuda_key(const std::string& target, const std::string& dtype, int64_t head_dim,
                           int64_t block_q, int64_t block_k, std::initializer_list<const char*> flags = {}) {
  VariantKey key = flash_schema().blank_key("cuda", target);
  key.set_enum("dtype", dtype);
  key.set_int("head_dim", head_dim), key.set_int("block_q", block_q), key.set_int("block_k", block_k);
  for (const char* f : flags) key.set_flag(f, true);
  flash_schema().validate(key);
  return key;
}

// Every header under kernels/ejk/kernels/{common,cuda} and their folders (cuda/wgmma), by
// include path.
inline const std::vector<std::pair<std::string, std::string>>& cuda_kernel_headers() {
  static const auto headers = [] {
    std::vector<std::pair<std::string, std::string>> h;
    const std::filesystem::path root = std::filesystem::path(source_dir()) / "kernels";
    for (const char* dir : {"ejk/kernels/common", "ejk/kernels/cuda"})
      for (const auto& e : std::filesystem::recursive_directory_iterator(root / dir)) {
        if (!e.is_regular_file()) continue;
        const std::string rel = std::filesystem::relative(e.path(), root).string();
        h.emplace_back(rel, source_file("kernels/" + rel));
      }
    return h;
  }();
  return headers;
}

// The source of a flash_fwd or flash_fwd_bias_rows key, rendered from its op's template.
inline cuda::CudaSource cuda_source(const VariantKey& key) {
  // Each op's template (named by its schema) read once (the NVRTC tests render keys on every
  // core at once).
  auto read_template = [](const OpSchema& schema) {
    return source_file("templates/" + schema.backend("cuda").template_file);
  };
  static const std::string flash_tmpl = read_template(flash_schema());
  static const std::string copy_tmpl = read_template(bias_rows_schema());
  const bool copy = key.op == bias_rows_schema().op();
  const OpSchema& schema = copy ? bias_rows_schema() : flash_schema();
  return {to_string(key) + ".cu", render_variant(schema, key, copy ? copy_tmpl : flash_tmpl, "test"),
          cuda_kernel_headers()};
}

}  // namespace ejk::test
