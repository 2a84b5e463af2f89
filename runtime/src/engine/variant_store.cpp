#include "engine/variant_store.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>

#include "cache/disk_cache.h"
#include "cache/get_or_build.h"
#include "cache/payload_check.h"
#include "ejk/core/error.h"
#include "observer.h"
#include "registry.h"
#include "util/hash.h"
#if EJK_HAVE_ORC_JIT
#include "jit/cpu_compiler.h"
#include "jit/cpu_loader.h"
#endif
#if EJK_HAVE_CUDA
#include "cuda/device.h"
#include "cuda/nvrtc_compiler.h"
#endif

namespace ejk::engine {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

cache::DiskCache& disk() {
  static cache::DiskCache cache;  // root from EJK_CACHE_DIR / XDG_CACHE_HOME / ~/.cache
  return cache;
}

// Everything that determines a binary: the backend, key, rendered source, generator version,
// the compiler's identity and every kernel header the source may include.
std::string content_hash(std::string_view backend, const std::string& key, const std::string& source,
                         const std::string& compiler) {
  std::vector<std::string_view> parts{backend, key, source, generated::kGeneratorVersion, compiler};
  for (const auto& [path, text] : detail::kernel_headers()) {
    parts.push_back(path);
    parts.push_back(text);
  }
  return util::hash_strings_hex(parts);
}


#if EJK_HAVE_ORC_JIT
// The -march= of the key's target, so a compiled variant is the code its AOT build would be
// (an avx2 key gets AVX2 code on an AVX-512 host too).
std::string target_march(const OpSchema& schema, const VariantKey& key) {
  const TargetDef* t = schema.backend("cpu").find_target(key.target);
  if (t)
    for (const auto& f : t->compile_flags)
      if (f.rfind("-march=", 0) == 0) return f.substr(7);
  throw InvalidArgument(fmt::format("{}: target {} has no -march= flag", schema.file(), key.target));
}
#endif

Variant build_cpu(const OpSchema& schema, const VariantKey& key) {
  const std::string k = to_string(key);
  if (const auto* aot = detail::find_cpu_aot(k)) return {VariantSource::aot, 0, 0, {}, aot->fn, {}};
#if EJK_HAVE_ORC_JIT
  const std::string source = detail::render_source(schema, key);
  jit::CpuSource src{k + ".cpp", source, detail::kernel_headers(), target_march(schema, key)};
  const std::string hash =
      content_hash("cpu", k, source, jit::CpuCompiler::instance().identity_for_march(src.march));
  const auto t0 = std::chrono::steady_clock::now();
  const std::string symbol = symbol_name(key);
  auto build = [&] {
    detail::CompileNotice notice(k);
    return jit::CpuCompiler::instance().compile(src);
  };
  // Nothing is linked before it passed the payload check (an object, with the symbol, without
  // initializers); an entry the linker still refuses is removed and rebuilt once.
  auto check = [&](std::span<const uint8_t> b) { return cache::check_payload("cpu", symbol, b); };
  auto built = cache::get_or_build(disk(), "cpu", k, hash, build, check);
  const auto t1 = std::chrono::steady_clock::now();
  Variant v;
  try {
    v.cpu = reinterpret_cast<generated::CpuTaskFn>(jit::CpuLoader::instance().load(built.bytes, symbol));
  } catch (const CompileError& e) {
    if (built.source != cache::Source::Cache) throw;
    std::fprintf(stderr, "ejk: cached %s failed to load (%s): rebuilding it\n", k.c_str(), e.what());
    disk().remove_entry("cpu", k, hash);
    built = cache::get_or_build(disk(), "cpu", k, hash, build, check);
    v.cpu = reinterpret_cast<generated::CpuTaskFn>(jit::CpuLoader::instance().load(built.bytes, symbol));
  }
  const bool hit = built.source == cache::Source::Cache;
  v.source = hit ? VariantSource::cache : VariantSource::jit;
  v.compile_ms = built.build_ms;
  v.cache_path = disk().entry_path("cpu", k, hash).string();
  v.load_ms = hit ? ms_since(t0) : ms_since(t1);  // a hit's load covers reading and linking
  return v;
#else
  (void)schema;
  throw CompileError(fmt::format("variant {} is not built in, and this build has no CPU JIT "
                                 "(configured with EJK_ENABLE_ORC_JIT=OFF)", k));
#endif
}

#if EJK_HAVE_CUDA
void fill_resources(Cubin& c, const std::string& symbol) {
  const cuda::KernelResources res = cuda::cubin_resources(c.bytes, symbol);
  c.registers = res.registers;
  c.static_shared_bytes = res.static_smem_bytes;
}

// The arch a key's code is compiled for on `dev`: an arch-specific target ("sm90a") exactly; a
// portable one ("sm80") its own where the device has its major version, else the device's:
// a cubin of one major version does not load on another.
std::string cubin_arch(const VariantKey& key, const cuda::DeviceInfo& dev) {
  const std::string nominal = cuda::nvrtc_arch(key.target);
  if (key.target.ends_with('a') || nominal.substr(3, nominal.size() - 4) == std::to_string(dev.major)) return nominal;
  return "sm_" + std::to_string(dev.major * 10 + dev.minor);
}

Variant load_cuda(const OpSchema& schema, const VariantKey& key, Device device) {
  const cuda::DeviceInfo& dev = cuda::use_device(device.index);
  Cubin cubin = acquire_cubin(schema, key, cubin_arch(key, dev));
  cuda::use_device(device.index);
  const auto t0 = std::chrono::steady_clock::now();
  Variant v;
  v.cuda = std::make_shared<cuda::LoadedKernel>(cubin.bytes, symbol_name(key));
  v.source = cubin.source;
  v.compile_ms = cubin.compile_ms;
  v.load_ms = cubin.load_ms + ms_since(t0);
  v.cache_path = cubin.cache_path;
  return v;
}
#endif

}  // namespace

bool is_builtin(const std::string& key) {
  return detail::find_cpu_aot(key) != nullptr || detail::find_cuda_aot(key) != nullptr;
}

Cubin acquire_cubin(const OpSchema& schema, const VariantKey& key, std::string arch) {
#if EJK_HAVE_CUDA
  const std::string k = to_string(key), symbol = symbol_name(key);
  if (arch.empty()) arch = cuda::nvrtc_arch(key.target);
  Cubin out;
  // The built-in cubins are compiled for the target's own arch.
  if (const auto* aot = arch == cuda::nvrtc_arch(key.target) ? detail::find_cuda_aot(k) : nullptr) {
    out.bytes.assign(aot->image, aot->image + aot->size);
    fill_resources(out, symbol);
    return out;
  }
  const std::string source = detail::render_source(schema, key);
  const std::string hash = content_hash("cuda", k, source, cuda::NvrtcCompiler::get().identity() + arch);
  const auto t0 = std::chrono::steady_clock::now();
  auto built = cache::get_or_build(
      disk(), "cuda", k, hash,
      [&] {
        detail::CompileNotice notice(k);
        return cuda::NvrtcCompiler::get().compile({k + ".cu", source, detail::kernel_headers()}, arch, symbol).cubin;
      },
      [&](std::span<const uint8_t> b) { return cache::check_payload("cuda", symbol, b); });
  out.bytes = std::move(built.bytes);
  const bool hit = built.source == cache::Source::Cache;
  out.source = hit ? VariantSource::cache : VariantSource::jit;
  out.compile_ms = built.build_ms;
  out.load_ms = hit ? ms_since(t0) : 0;
  out.cache_path = disk().entry_path("cuda", k, hash).string();
  fill_resources(out, symbol);
  return out;
#else
  (void)schema;
  (void)arch;
  throw BackendUnavailable(fmt::format("variant {}: this build has no CUDA backend (configured with "
                                       "EJK_ENABLE_CUDA=OFF)", to_string(key)));
#endif
}

Variant acquire_variant(const OpSchema& schema, const VariantKey& key, Device device) {
  static std::mutex mu;
  static std::map<std::pair<int, std::string>, Variant> loaded;
  // The CPU is one device; CUDA devices each load their own module.
  const int slot = device.kind == DeviceKind::cpu ? -1 : device.index;
  auto id = std::make_pair(slot, to_string(key));
  {
    std::lock_guard lk(mu);
    if (auto it = loaded.find(id); it != loaded.end()) return it->second;
  }
  // Built outside the lock: a compile must not stall other variants' lookups.
  Variant v;
  if (key.backend == "cpu") v = build_cpu(schema, key);
#if EJK_HAVE_CUDA
  else if (key.backend == "cuda") v = load_cuda(schema, key, device);
#endif
  else throw BackendUnavailable(fmt::format("variant {}: backend {} is not in this build", id.second, key.backend));
  std::lock_guard lk(mu);
  return loaded.emplace(id, std::move(v)).first->second;
}

}  // namespace ejk::engine
