#include "registry.h"

#include <fmt/format.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "ejk/core/error.h"
#include "ejk/core/kernel_abi.h"
#include "ejk/core/render_variant.h"

namespace ejk::detail {
namespace {

struct Schemas {
  std::map<std::string, std::unique_ptr<OpSchema>, std::less<>> by_op;
};

const Schemas& schemas() {
  static const Schemas s = [] {
    Schemas out;
    // specs/targets.yaml is the table the specs' named targets come from, not an op.
    const std::string table_path = "specs/" + std::string(TargetTable::kFileName);
    std::optional<TargetTable> table;
    for (size_t i = 0; i < generated::kNumSpecs; ++i)
      if (generated::kSpecs[i].path == table_path)
        table = TargetTable::parse({generated::kSpecs[i].text, generated::kSpecs[i].size}, table_path);
    for (size_t i = 0; i < generated::kNumSpecs; ++i) {
      const auto& f = generated::kSpecs[i];
      if (f.path == table_path) continue;
      auto schema = std::make_unique<OpSchema>(OpSchema::parse({f.text, f.size}, f.path, table ? &*table : nullptr));
      std::string op = schema->op();
      out.by_op.emplace(std::move(op), std::move(schema));
    }
    return out;
  }();
  return s;
}

// CPU variants a program registered. Entries are never removed, so pointers into the map stay
// valid; `any` spares the lock on lookups in processes that register none.
struct UserCpuVariants {
  std::mutex mu;
  std::map<std::string, generated::CpuAotEntry, std::less<>> by_key;
  std::atomic<bool> any{false};
};

UserCpuVariants& user_cpu_variants() {
  static UserCpuVariants v;
  return v;
}

const generated::CpuAotEntry* find_library_cpu_aot(std::string_view key) {
  static const auto index = [] {
    std::map<std::string_view, const generated::CpuAotEntry*> m;
    for (size_t i = 0; i < generated::kNumCpuAot; ++i) m.emplace(generated::kCpuAot[i].key, &generated::kCpuAot[i]);
    return m;
  }();
  auto it = index.find(key);
  return it == index.end() ? nullptr : it->second;
}

const generated::CpuAotEntry* find_user_cpu_aot(std::string_view key) {
  UserCpuVariants& user = user_cpu_variants();
  if (!user.any.load(std::memory_order_acquire)) return nullptr;
  std::lock_guard lock(user.mu);
  auto it = user.by_key.find(key);
  return it == user.by_key.end() ? nullptr : &it->second;
}

// Why a program's entry cannot be registered; empty if it can (duplicates among the program's
// own are found on insertion).
std::string refusal(const generated::CpuAotEntry& e) {
  if (e.key == nullptr) return "an entry without a key";
  const std::string_view key(e.key);
  if (e.fn == nullptr) return fmt::format("'{}': no function", key);
  try {
    const OpSchema& schema = op_schema(key.substr(0, key.find('.')));
    const VariantKey k = schema.parse_key(key);
    schema.validate(k);
    if (k.backend != "cpu") return fmt::format("'{}': not a CPU key", key);
  } catch (const Error& err) {
    const std::string_view what = err.what();
    return what.find(key) != std::string_view::npos ? std::string(what) : fmt::format("'{}': {}", key, what);
  }
  if (find_library_cpu_aot(key)) return fmt::format("'{}': built into libejk already", key);
  return {};
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
  if (const auto* own = find_library_cpu_aot(key)) return own;
  return find_user_cpu_aot(key);
}

const generated::CudaAotEntry* find_cuda_aot(std::string_view key) {
  for (size_t i = 0; i < generated::kNumCudaAot; ++i)
    if (key == generated::kCudaAot[i].key) return &generated::kCudaAot[i];
  return nullptr;
}

const std::string& kernel_abi() {
  static const std::string abi = [] {
    std::vector<NamedText> files;
    for (size_t i = 0; i < generated::kNumTemplates; ++i)
      files.push_back({generated::kTemplates[i].path, {generated::kTemplates[i].text, generated::kTemplates[i].size}});
    for (size_t i = 0; i < generated::kNumKernelHeaders; ++i)
      files.push_back({generated::kKernelHeaders[i].path,
                       {generated::kKernelHeaders[i].text, generated::kKernelHeaders[i].size}});
    return kernel_abi_fingerprint(generated::kGeneratorVersion, std::move(files));
  }();
  return abi;
}

std::vector<std::string> register_cpu_variants(std::string_view abi, std::span<const generated::CpuAotEntry> entries) {
  std::vector<std::string> refused;
  if (abi != kernel_abi()) {
    refused.push_back(fmt::format("{} CPU variants generated from kernel headers '{}', but this libejk was built "
                                  "from '{}': rebuild the program against this installation",
                                  entries.size(), abi, kernel_abi()));
    return refused;
  }
  UserCpuVariants& user = user_cpu_variants();
  std::lock_guard lock(user.mu);
  for (const generated::CpuAotEntry& e : entries) {
    if (std::string why = refusal(e); !why.empty()) {
      refused.push_back(std::move(why));
      continue;
    }
    auto [it, inserted] = user.by_key.try_emplace(e.key, e);
    if (!inserted) {
      refused.push_back(fmt::format("'{}': registered already", e.key));
      continue;
    }
    it->second.key = it->first.c_str();  // ours, not the caller's string
  }
  user.any.store(!user.by_key.empty(), std::memory_order_release);
  return refused;
}

}  // namespace ejk::detail
