// list_ops, the cache commands and compile_variant (ejk/admin.h).
#include "ejk/admin.h"

#include <fmt/format.h>

#include <chrono>

#include "cache/disk_cache.h"
#include "cpu_backend.h"
#include "device_memory.h"
#if EJK_HAVE_CUDA
#include "cuda/cuda_backend.h"
#include "cuda_variants.h"
#include "flash_dispatch.h"
#endif
#include "ejk/core/error.h"
#include "registry.h"

namespace ejk {

std::vector<OpListing> list_ops() {
  std::vector<OpListing> out;
  for (const OpSchema* s : detail::all_op_schemas()) {
    OpListing l{s->api(), s->op(), s->file(), {}, {}};
    for (const auto& b : s->backends()) l.backends.push_back(b.name);
    std::string prefix = s->op() + ".";
    for (size_t i = 0; i < generated::kNumCpuAot; ++i)
      if (std::string_view(generated::kCpuAot[i].key).starts_with(prefix)) l.builtin.push_back(generated::kCpuAot[i].key);
    for (size_t i = 0; i < generated::kNumCudaAot; ++i)
      if (std::string_view(generated::kCudaAot[i].key).starts_with(prefix)) l.builtin.push_back(generated::kCudaAot[i].key);
    out.push_back(std::move(l));
  }
  return out;
}

bool cpu_jit_available() { return EJK_HAVE_ORC_JIT != 0; }

std::filesystem::path cache_root() { return cache::default_root(); }

std::vector<CacheEntry> cache_list(bool verify) {
  std::vector<CacheEntry> out;
  for (const auto& e : cache::DiskCache().list(verify))
    out.push_back({e.backend, e.key, e.hash_hex, e.path, e.size, e.valid, e.problem});
  return out;
}

size_t cache_clear() { return cache::DiskCache().clear(); }

namespace {

const OpSchema& schema_for_api(std::string_view api) {
  for (const OpSchema* s : detail::all_op_schemas())
    if (s->api() == api) return *s;
  throw InvalidArgument(fmt::format("compile: unknown op '{}'", api));
}

// Sets the request's axis values on the key; block sizes the request leaves out come from the
// spec's heuristic for a long sequence.
VariantKey key_from_request(const OpSchema& schema, const CompileRequest& req, const std::string& target) {
  VariantKey key = schema.blank_key(req.backend, target);
  std::map<std::string, int64_t> problem{{"seqlen_q", 4096}, {"seqlen_k", 4096}, {"causal", 0},
                                         {"head_dim", key.get_int("head_dim")}};
  for (const auto& [name, value] : req.axes) {
    const AxisValue& a = key.axis(name);
    try {
      switch (a.kind) {
        case AxisKind::Int: key.set_int(name, std::stoll(value)); problem[name] = std::stoll(value); break;
        case AxisKind::Enum: key.set_enum(name, value); break;
        case AxisKind::Flag: key.set_flag(name, value == "1" || value == "true"); problem[name] = key.get_flag(name); break;
      }
    } catch (const std::invalid_argument&) {
      throw InvalidArgument(fmt::format("compile: axis {} expects an integer, got '{}'", name, value));
    }
  }
  if (key.get_enum("dtype") == "f32") problem["dtype_bytes"] = 4; else problem["dtype_bytes"] = 2;
  problem["extras"] = detail::logit_extras(key);
  problem["bias"] = key.get_flag("bias");
  auto chosen = schema.choose_config(req.backend, target, problem);
  for (const char* b : {"block_q", "block_k"})
    if (!req.axes.contains(b)) key.set_int(b, chosen.at(b));
  // Tuning flags the request leaves out come with the heuristic's tile, as in flash_key.
  if (!req.axes.contains("block_q") && !req.axes.contains("block_k")) {
    std::erase_if(chosen, [&](const auto& c) { return req.axes.contains(c.first); });
    detail::set_tuning_flags(schema, key, chosen);
  }
  schema.validate(key);
  return key;
}

// CUDA variants compile for a named arch with NVRTC and need no GPU, so a build machine can
// warm a cache for a fleet; without --arch the current device's is used.
CompileReport compile_cuda(const OpSchema& schema, const CompileRequest& req) {
#if EJK_HAVE_CUDA
  std::string target = req.target;
  if (target.empty()) {
    std::string why;
    if (!detail::cuda_usable(&why))
      throw InvalidArgument("compile: --arch is required without a usable GPU (" + why + ")");
    target = cuda::use_device(0).target;
  }
  if (!schema.backend("cuda").find_target(target))
    throw InvalidArgument(fmt::format("compile: unknown CUDA target '{}' (e.g. sm80, sm90a)", target));
  VariantKey key = key_from_request(schema, req, target);
  detail::CudaCubin c = detail::acquire_cuda_cubin(schema, key);
  // A bias key's launches may need the bias copy too: a target without it built in gets it
  // into the cache now, so a pre-warmed cache serves the key without NVRTC.
  if (key.get_flag("bias"))
    detail::acquire_cuda_cubin(detail::op_schema("flash_fwd_bias_rows"), detail::bias_rows_key(target));
  CompileReport rep;
  rep.key = to_string(key);
  rep.target = target;
  rep.source = std::string(source_name(c.source));
  rep.compile_ms = c.compile_ms;
  rep.cache_path = c.cache_path;
  rep.registers = c.registers;
  // What a launch uses: the entry's static shared memory plus the dynamic shared memory the
  // runtime launches the key with.
  if (c.static_shared_bytes >= 0)
    rep.shared_bytes = c.static_shared_bytes +
                       cuda::flash_fwd_smem_bytes(key.target, key.get_int("head_dim"),
                                                  key.get_int("block_q"), key.get_int("block_k"),
                                                  key.get_flag("per_item"), key.get_flag("bias"));
  return rep;
#else
  (void)schema;
  (void)req;
  throw BackendUnavailable("compile: this build has no CUDA backend (configured with EJK_ENABLE_CUDA=OFF)");
#endif
}

}  // namespace

CompileReport compile_variant(const CompileRequest& req) {
  const OpSchema& schema = schema_for_api(req.api);
  if (req.backend == "cuda") return compile_cuda(schema, req);
  if (req.backend != "cpu")
    throw BackendUnavailable(fmt::format("compile: backend '{}' is not available in this build", req.backend));
  std::string host = detail::host_cpu_target(schema);
  std::string target = req.target.empty() ? host : req.target;
  if (target != host)
    throw InvalidArgument(fmt::format("compile: CPU variants compile for this host's target {} "
                                      "(EJK_CPU_TARGET selects another), got --target {}", host, target));
  VariantKey key = key_from_request(schema, req, target);
  detail::CpuVariant v = detail::acquire_cpu_variant(schema, key);
  CompileReport rep;
  rep.key = to_string(key);
  rep.target = target;
  rep.source = std::string(source_name(v.source));
  rep.compile_ms = v.compile_ms;
  rep.cache_path = v.cache_path;
  return rep;
}

}  // namespace ejk
