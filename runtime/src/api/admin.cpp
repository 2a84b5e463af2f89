// list_ops, the cache commands and compile_variant (ejk/admin.h), for every op alike.
#include "ejk/admin.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>

#include "cache/disk_cache.h"
#include "ejk/core/error.h"
#include "ejk/op.h"
#include "engine/host_cpu.h"
#include "engine/keys.h"
#include "engine/op_def.h"
#include "engine/variant_store.h"
#include "jit/cpu_compiler.h"
#include "registry.h"
#if EJK_HAVE_CUDA
#include "cuda/device.h"
#endif
#include "device_memory.h"

namespace ejk {
namespace {

const OpSchema& schema_for(std::string_view api) {
  for (const OpSchema* s : detail::all_op_schemas())
    if (s->api() == api || (s->internal() && s->op() == api)) return *s;
  throw InvalidArgument(fmt::format("compile: unknown op '{}' (ops: {})", api, fmt::join(op_names(), ", ")));
}

const engine::OpDef* op_for(const OpSchema& s) {
  for (const engine::OpDef* op : engine::all_ops())
    if (&op->schema() == &s) return op;
  return nullptr;  // an internal op: no companions, no launch facts
}

int64_t parse_int(const std::string& axis, const std::string& text) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty())
    throw InvalidArgument(fmt::format("compile: axis {} expects an integer, got '{}'", axis, text));
  return v;
}

bool parse_flag(const std::string& axis, const std::string& text) {
  if (text == "1" || text == "true") return true;
  if (text == "0" || text == "false") return false;
  throw InvalidArgument(fmt::format("compile: flag {} expects 0/1 or true/false, got '{}'", axis, text));
}

engine::AxisValues request_axes(const OpSchema& s, const CompileRequest& req) {
  engine::AxisValues v;
  for (const auto& [name, text] : req.axes) {
    const AxisDef& a = s.axis(name);  // InvalidArgument naming the axis
    const int i = int(&a - s.axes().data());
    switch (a.kind) {
      case AxisKind::Int: v.put(i, parse_int(name, text)); break;
      case AxisKind::Flag: v.put(i, parse_flag(name, text)); break;
      case AxisKind::Enum: v.put(i, s.enum_index(name, text)); break;
    }
  }
  return v;
}

std::string cuda_target(const OpSchema& s, const CompileRequest& req) {
  if (!req.target.empty()) {
    if (!s.backend("cuda").find_target(req.target))
    {
      std::vector<std::string> names;
      for (const TargetDef& t : s.backend("cuda").targets) names.push_back(t.name);
      throw InvalidArgument(fmt::format("compile: unknown CUDA target '{}' for {} (targets: {})", req.target, s.api(),
                                        fmt::join(names, ", ")));
    }
    return req.target;
  }
  std::string why;
  if (!detail::cuda_usable(&why)) throw InvalidArgument("compile: --arch is required without a usable GPU (" + why + ")");
  return engine::target_for(s, Backend::cuda, Device{DeviceKind::cuda, 0});
}

// CUDA variants compile for a named arch with NVRTC and need no GPU, so a build machine can warm
// a cache for a fleet; without --arch the current device's is used.
CompileReport compile_cuda(const OpSchema& s, const CompileRequest& req) {
  const std::string target = cuda_target(s, req);
  const VariantKey key = engine::make_key(s, "cuda", target, request_axes(s, req), {});
  const engine::Cubin c = engine::acquire_cubin(s, key);
  const engine::OpDef* op = op_for(s);
  // A key's launches may need companions (flash's bias copy): a target without them built in
  // gets them into the cache now, so a pre-warmed cache serves the key without NVRTC.
  if (op)
    for (const VariantKey& companion : op->companions(key)) engine::acquire_cubin(detail::op_schema(companion.op), companion);
  CompileReport rep{to_string(key), target, std::string(source_name(c.source)), c.compile_ms, c.cache_path, c.registers, -1};
  if (c.static_shared_bytes >= 0) rep.shared_bytes = c.static_shared_bytes + (op ? op->cuda_dynamic_smem(key) : 0);
  return rep;
}

}  // namespace

std::vector<OpListing> list_ops() {
  std::vector<OpListing> out;
  for (const OpSchema* s : detail::all_op_schemas()) {
    OpListing l{s->api(), s->op(), s->file(), {}, {}};
    for (const auto& b : s->backends()) l.backends.push_back(b.name);
    const std::string prefix = s->op() + ".";
    for (size_t i = 0; i < generated::kNumCpuAot; ++i)
      if (std::string_view(generated::kCpuAot[i].key).starts_with(prefix)) l.builtin.push_back(generated::kCpuAot[i].key);
    for (size_t i = 0; i < generated::kNumCudaAot; ++i)
      if (std::string_view(generated::kCudaAot[i].key).starts_with(prefix)) l.builtin.push_back(generated::kCudaAot[i].key);
    out.push_back(std::move(l));
  }
  return out;
}

bool cpu_jit_available() { return jit::CpuCompiler::available(); }

std::filesystem::path cache_root() { return cache::default_root(); }

std::vector<CacheEntry> cache_list(bool verify) {
  std::vector<CacheEntry> out;
  for (const auto& e : cache::DiskCache().list(verify))
    out.push_back({e.backend, e.key, e.hash_hex, e.path, e.size, e.valid, e.problem, e.kind});
  return out;
}

size_t cache_clear() { return cache::DiskCache().clear(); }

CompileReport compile_variant(const CompileRequest& req) {
  const OpSchema& s = schema_for(req.api);
  if (!s.has_backend(req.backend))
    throw InvalidArgument(fmt::format("compile: {} has no {} kernels", req.api, req.backend));
  if (req.backend == "cuda") return compile_cuda(s, req);
  if (req.backend != "cpu")
    throw BackendUnavailable(fmt::format("compile: backend '{}' is not available in this build", req.backend));
  const std::string& host = engine::host_cpu_target(s.backend("cpu").targets);
  if (!req.target.empty() && req.target != host)
    throw InvalidArgument(fmt::format("compile: CPU variants compile for this host's target {} (EJK_CPU_TARGET selects "
                                      "another), got --target {}", host, req.target));
  const VariantKey key = engine::make_key(s, "cpu", host, request_axes(s, req), {});
  const engine::Variant v = engine::acquire_variant(s, key, Device{});
  return {to_string(key), host, std::string(source_name(v.source)), v.compile_ms, v.cache_path, -1, -1};
}

}  // namespace ejk
