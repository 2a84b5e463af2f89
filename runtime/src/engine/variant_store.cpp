#include "engine/variant_store.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>

#include "bundle/bundle_set.h"
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

cache::PayloadCheck payload_check(std::string_view backend, const std::string& symbol) {
  return [backend, symbol](std::span<const uint8_t> b) { return cache::check_payload(backend, symbol, b); };
}

// What the run-time path knows of a CUDA key before compiling: its source for `arch`.
struct CudaJob {
  std::string key, symbol, source, arch;
};

CudaJob cuda_job(const OpSchema& schema, const VariantKey& key, std::string arch) {
  return {to_string(key), symbol_name(key), detail::render_source(schema, key), std::move(arch)};
}

// `compiler`: NVRTC's identity; the arch joins it, as a cubin for another arch is another binary.
std::string cuda_hash(const CudaJob& j, const std::string& compiler) {
  return content_hash("cuda", j.key, j.source, compiler + j.arch);
}

// The compiler a bundle's cubin must come from: NVRTC here, or, where it is not installed or the
// JIT is disabled, the entry's own (a process that cannot compile takes a cubin whose sources and
// generator match, and does not load NVRTC, ~10 ms, only to name it).
std::string bundle_compiler(const bundle::EntryMeta& m) {
#if EJK_HAVE_CUDA
  if (cache::jit_disabled()) return m.compiler;
  if (const cuda::NvrtcCompiler* nvrtc = cuda::NvrtcCompiler::load()) return nvrtc->identity();
#endif
  return m.compiler;
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

// What the JIT path knows of a CPU key before compiling: its source for the key's target and
// the hash of everything that determines its object.
struct CpuJob {
  std::string key, symbol, compiler, hash;
  jit::CpuSource src;
};

CpuJob cpu_job(const OpSchema& schema, const VariantKey& key) {
  CpuJob j;
  j.key = to_string(key);
  j.symbol = symbol_name(key);
  j.src = {j.key + ".cpp", detail::render_source(schema, key), detail::kernel_headers(), target_march(schema, key)};
  j.compiler = jit::CpuCompiler::instance().identity_for_march(j.src.march);
  j.hash = content_hash("cpu", j.key, j.src.text, j.compiler);
  return j;
}

// From the disk cache, else compiled and stored there. Nothing is returned before it passed the
// payload check (an object, with the symbol, without initializers).
cache::BuildResult cpu_object(const CpuJob& j) {
  auto build = [&] {
    detail::CompileNotice notice(j.key);
    return jit::CpuCompiler::instance().compile(j.src);
  };
  return cache::get_or_build(disk(), "cpu", j.key, j.hash, build, payload_check("cpu", j.symbol));
}

generated::CpuTaskFn link_cpu(std::span<const uint8_t> object, const std::string& symbol) {
  return reinterpret_cast<generated::CpuTaskFn>(jit::CpuLoader::instance().load(object, symbol));
}

// The key from the first bundle with a current, intact object for it; an object the linker
// still refuses rejects that entry, and the next bundle is tried.
std::optional<Variant> cpu_from_bundle(const CpuJob& j) {
  const auto t0 = std::chrono::steady_clock::now();
  auto expected = [&](const bundle::EntryMeta&) { return j.hash; };
  while (auto hit = bundle::find("cpu", j.key, "", expected, payload_check("cpu", j.symbol))) {
    try {
      Variant v;
      v.cpu = link_cpu(hit->bytes, j.symbol);
      v.source = VariantSource::bundle;
      v.load_ms = ms_since(t0);  // reading, verifying, decompressing and linking
      v.cache_path = hit->bundle;
      return v;
    } catch (const CompileError& e) {
      bundle::reject(*hit, e.what());
    }
  }
  return std::nullopt;
}
#endif

Variant build_cpu(const OpSchema& schema, const VariantKey& key) {
  const std::string k = to_string(key);
  if (const auto* aot = detail::find_cpu_aot(k)) return {VariantSource::aot, 0, 0, {}, aot->fn, {}};
#if EJK_HAVE_ORC_JIT
  if (!jit::CpuCompiler::available())
    throw CompileError(fmt::format("variant {} is not built in, and {}", k, jit::CpuCompiler::unavailable_reason()));
  const CpuJob job = cpu_job(schema, key);
  if (auto v = cpu_from_bundle(job)) return std::move(*v);
  const auto t0 = std::chrono::steady_clock::now();
  auto built = cpu_object(job);
  const auto t1 = std::chrono::steady_clock::now();
  Variant v;
  // An entry the linker still refuses is removed and rebuilt once.
  try {
    v.cpu = link_cpu(built.bytes, job.symbol);
  } catch (const CompileError& e) {
    if (built.source != cache::Source::Cache) throw;
    std::fprintf(stderr, "ejk: cached %s failed to load (%s): rebuilding it\n", k.c_str(), e.what());
    disk().remove_entry("cpu", k, job.hash);
    built = cpu_object(job);
    v.cpu = link_cpu(built.bytes, job.symbol);
  }
  const bool hit = built.source == cache::Source::Cache;
  v.source = hit ? VariantSource::cache : VariantSource::jit;
  v.compile_ms = built.build_ms;
  v.cache_path = disk().entry_path("cpu", k, job.hash).string();
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

cache::BuildResult cuda_cubin(const CudaJob& j, const std::string& compiler) {
  auto build = [&] {
    detail::CompileNotice notice(j.key);
    return cuda::NvrtcCompiler::get().compile({j.key + ".cu", j.source, detail::kernel_headers()}, j.arch, j.symbol).cubin;
  };
  return cache::get_or_build(disk(), "cuda", j.key, cuda_hash(j, compiler), build, payload_check("cuda", j.symbol));
}

Variant load_cuda(const OpSchema& schema, const VariantKey& key, Device device) {
  const cuda::DeviceInfo& dev = cuda::use_device(device.index);
  Cubin cubin = acquire_cubin(schema, key, cubin_arch(key, dev.major, dev.minor));
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
  const CudaJob job = cuda_job(schema, key, arch);
  const auto t0 = std::chrono::steady_clock::now();
  auto expected = [&](const bundle::EntryMeta& m) { return cuda_hash(job, bundle_compiler(m)); };
  if (auto hit = bundle::find("cuda", k, arch, expected, payload_check("cuda", symbol))) {
    out.bytes = std::move(hit->bytes);
    out.source = VariantSource::bundle;
    out.load_ms = ms_since(t0);
    out.cache_path = hit->bundle;
    fill_resources(out, symbol);
    return out;
  }
  const std::string compiler = cuda::NvrtcCompiler::get().identity();
  auto built = cuda_cubin(job, compiler);
  out.bytes = std::move(built.bytes);
  const bool hit = built.source == cache::Source::Cache;
  out.source = hit ? VariantSource::cache : VariantSource::jit;
  out.compile_ms = built.build_ms;
  out.load_ms = hit ? ms_since(t0) : 0;
  out.cache_path = disk().entry_path("cuda", k, cuda_hash(job, compiler)).string();
  fill_resources(out, symbol);
  return out;
#else
  (void)schema;
  (void)arch;
  throw BackendUnavailable(fmt::format("variant {}: this build has no CUDA backend (configured with "
                                       "EJK_ENABLE_CUDA=OFF)", to_string(key)));
#endif
}

#if EJK_HAVE_CUDA
// A portable target ("sm80") is compiled for its own arch where the device has its major version,
// else for the device's: a cubin of one major version does not load on another.
std::string cubin_arch(const VariantKey& key, int major, int minor) {
  const std::string nominal = cuda::nvrtc_arch(key.target);
  if (key.target.ends_with('a') || nominal.substr(3, nominal.size() - 4) == std::to_string(major)) return nominal;
  return "sm_" + std::to_string(major * 10 + minor);
}
#endif

Binary compile_binary(const OpSchema& schema, const VariantKey& key, const std::string& arch) {
  if (key.backend == "cpu") {
#if EJK_HAVE_ORC_JIT
    const CpuJob j = cpu_job(schema, key);
    cache::BuildResult built = cpu_object(j);
    return {std::move(built.bytes), j.src.march, j.compiler, j.hash,
            built.source == cache::Source::Cache ? VariantSource::cache : VariantSource::jit, built.build_ms};
#else
    throw BackendUnavailable(fmt::format("variant {}: compiling CPU variants needs the CPU JIT (this build was "
                                         "configured with EJK_ENABLE_ORC_JIT=OFF)", to_string(key)));
#endif
  }
#if EJK_HAVE_CUDA
  if (key.backend == "cuda") {
    const CudaJob j = cuda_job(schema, key, arch);
    const std::string compiler = cuda::NvrtcCompiler::get().identity();
    cache::BuildResult built = cuda_cubin(j, compiler);
    return {std::move(built.bytes), arch, compiler, cuda_hash(j, compiler),
            built.source == cache::Source::Cache ? VariantSource::cache : VariantSource::jit, built.build_ms};
  }
#endif
  (void)schema;
  (void)arch;
  throw BackendUnavailable(fmt::format("variant {}: this build cannot compile {} variants", to_string(key), key.backend));
}

std::optional<std::string> bundle_hash_here(const OpSchema& schema, const VariantKey& key, const bundle::EntryMeta& m) {
  if (key.backend == "cuda") return cuda_hash(cuda_job(schema, key, m.arch), bundle_compiler(m));
#if EJK_HAVE_ORC_JIT
  if (key.backend == "cpu") return cpu_job(schema, key).hash;
#endif
  return std::nullopt;
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
