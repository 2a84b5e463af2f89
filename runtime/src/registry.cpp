#include "registry.h"

#include <fmt/format.h>

#include <map>
#include <memory>
#include <mutex>

#include "ejk/core/error.h"
#include "ejk/core/render_variant.h"

namespace ejk::detail {
namespace {

struct Schemas {
  std::map<std::string, std::unique_ptr<OpSchema>, std::less<>> by_op;
};

const Schemas& schemas() {
  static const Schemas s = [] {
    Schemas out;
    for (size_t i = 0; i < generated::kNumSpecs; ++i) {
      const auto& f = generated::kSpecs[i];
      auto schema = std::make_unique<OpSchema>(OpSchema::parse({f.text, f.size}, f.path));
      std::string op = schema->op();
      out.by_op.emplace(std::move(op), std::move(schema));
    }
    return out;
  }();
  return s;
}

}  // namespace

const OpSchema& op_schema(std::string_view op) {
  const auto& s = schemas();
  auto it = s.by_op.find(op);
  if (it == s.by_op.end()) {
    std::string known;
    for (const auto& [name, _] : s.by_op) known += (known.empty() ? "" : ", ") + name;
    throw InvalidArgument(fmt::format("op '{}' is not in this build (ops: {})", op, known));
  }
  return *it->second;
}

std::vector<const OpSchema*> all_op_schemas() {
  std::vector<const OpSchema*> out;
  for (const auto& [_, s] : schemas().by_op) out.push_back(s.get());
  return out;
}

std::string_view template_text(std::string_view name) {
  for (size_t i = 0; i < generated::kNumTemplates; ++i) {
    const auto& f = generated::kTemplates[i];
    std::string_view path(f.path);
    if (path == name || (path.size() > name.size() && path.ends_with(name) &&
                         path[path.size() - name.size() - 1] == '/'))
      return {f.text, f.size};
  }
  throw InvalidArgument(fmt::format("template '{}' is not embedded in this build", name));
}

const std::vector<std::pair<std::string, std::string>>& kernel_headers() {
  static const auto headers = [] {
    std::vector<std::pair<std::string, std::string>> h;
    for (size_t i = 0; i < generated::kNumKernelHeaders; ++i)
      h.emplace_back(generated::kKernelHeaders[i].path,
                     std::string(generated::kKernelHeaders[i].text, generated::kKernelHeaders[i].size));
    return h;
  }();
  return headers;
}

std::string render_source(const OpSchema& schema, const VariantKey& key) {
  const auto& backend = schema.backend(key.backend);
  return render_variant(schema, key, template_text(backend.template_file),
                        generated::kGeneratorVersion);
}

const generated::CpuAotEntry* find_cpu_aot(std::string_view key) {
  static const auto index = [] {
    std::map<std::string_view, const generated::CpuAotEntry*> m;
    for (size_t i = 0; i < generated::kNumCpuAot; ++i) m.emplace(generated::kCpuAot[i].key, &generated::kCpuAot[i]);
    return m;
  }();
  auto it = index.find(key);
  return it == index.end() ? nullptr : it->second;
}

const generated::CudaAotEntry* find_cuda_aot(std::string_view key) {
  for (size_t i = 0; i < generated::kNumCudaAot; ++i)
    if (key == generated::kCudaAot[i].key) return &generated::kCudaAot[i];
  return nullptr;
}

}  // namespace ejk::detail
