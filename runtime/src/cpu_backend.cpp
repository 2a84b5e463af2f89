#include "cpu_backend.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>

#include <sys/syscall.h>
#include <unistd.h>

#include "cache/disk_cache.h"
#include "cache/get_or_build.h"
#include "ejk/core/error.h"
#include "observer.h"
#include "registry.h"
#include "thread_pool.h"
#include "util/hash.h"
#if EJK_HAVE_ORC_JIT
#include "jit/cpu_compiler.h"
#include "jit/cpu_loader.h"
#endif

namespace ejk::detail {
namespace {

// Linux hands the AMX tile state to a process only on request (arch_prctl
// ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); amx-target kernels carry no fallback engine, so a
// host whose OS refuses counts as lacking amx-tile.
bool os_grants_amx_tiles() {
#if defined(__linux__) && defined(__x86_64__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

// __builtin_cpu_supports needs literal names, hence a table.
bool host_has(std::string_view feature) {
  __builtin_cpu_init();
  static const std::map<std::string_view, bool> kHost = {
      {"avx512f", __builtin_cpu_supports("avx512f")},   {"avx512bw", __builtin_cpu_supports("avx512bw")},
      {"avx512vl", __builtin_cpu_supports("avx512vl")}, {"avx512dq", __builtin_cpu_supports("avx512dq")},
      {"avx512bf16", __builtin_cpu_supports("avx512bf16")},
      {"amx-tile", __builtin_cpu_supports("amx-tile") && os_grants_amx_tiles()}, {"amx-bf16", __builtin_cpu_supports("amx-bf16")},
      {"avx2", __builtin_cpu_supports("avx2")},         {"fma", __builtin_cpu_supports("fma")},
      {"f16c", __builtin_cpu_supports("f16c")},         {"sse4.2", __builtin_cpu_supports("sse4.2")},
  };
  auto it = kHost.find(feature);
  if (it == kHost.end())
    throw InvalidArgument(fmt::format("spec names CPU feature '{}', which this runtime cannot test "
                                      "(known: avx512f/bw/vl/dq/bf16, amx-tile, amx-bf16, avx2, fma, f16c, sse4.2)", feature));
  return it->second;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

#if EJK_HAVE_ORC_JIT
// The -march= of the key's target, so a JIT-built variant is the code its AOT build would be
// (an avx2 key gets AVX2 code on an AVX-512 host too).
std::string target_march(const OpSchema& schema, const VariantKey& key) {
  const TargetDef* t = schema.backend("cpu").find_target(key.target);
  if (t)
    for (const auto& f : t->compile_flags)
      if (f.rfind("-march=", 0) == 0) return f.substr(7);
  throw InvalidArgument(fmt::format("{}: target {} has no -march= flag", schema.file(), key.target));
}

// Everything that determines the object: the source and every header it may include, the
// generator version, and the compiler with its flags and target CPU.
std::string jit_hash(const std::string& key, const std::string& source, const std::string& march) {
  std::string identity = jit::CpuCompiler::instance().identity_for_march(march);
  std::vector<std::string_view> parts{"cpu", key, source, generated::kGeneratorVersion, identity};
  for (const auto& [path, text] : kernel_headers()) {
    parts.push_back(path);
    parts.push_back(text);
  }
  return util::hash_strings_hex(parts);
}
#endif

CpuVariant build_or_load(const OpSchema& schema, const VariantKey& key) {
  std::string k = to_string(key);
  if (const auto* aot = find_cpu_aot(k)) return {aot->fn, VariantSource::aot, 0, 0};
#if EJK_HAVE_ORC_JIT
  std::string source = render_source(schema, key);
  jit::CpuSource src{k + ".cpp", source, kernel_headers(), target_march(schema, key)};
  std::string hash = jit_hash(k, source, src.march);
  static cache::DiskCache disk;  // root from EJK_CACHE_DIR / XDG_CACHE_HOME / ~/.cache
  auto t0 = std::chrono::steady_clock::now();
  auto built = cache::get_or_build(disk, "cpu", k, hash, [&] {
    CompileNotice notice(k);
    return jit::CpuCompiler::instance().compile(src);
  });
  bool hit = built.source == cache::Source::Cache;
  auto t1 = std::chrono::steady_clock::now();
  void* fn = jit::CpuLoader::instance().load(built.bytes, symbol_name(key));
  CpuVariant v;
  v.fn = reinterpret_cast<generated::CpuTaskFn>(fn);
  v.source = hit ? VariantSource::cache : VariantSource::jit;
  v.compile_ms = built.build_ms;
  v.cache_path = disk.entry_path("cpu", k, hash).string();
  // A hit's load time covers reading and verifying the entry and linking it.
  v.load_ms = hit ? ms_since(t0) : ms_since(t1);
  return v;
#else
  (void)schema;
  throw CompileError(fmt::format("variant {} is not built in, and this build has no CPU JIT "
                                 "(configured with EJK_ENABLE_ORC_JIT=OFF)", k));
#endif
}

}  // namespace

std::string host_cpu_target(const OpSchema& schema) {
  const auto& targets = schema.backend("cpu").targets;
  // EJK_CPU_TARGET forces a narrower target (e.g. to test or benchmark avx2 code on an
  // AVX-512 machine); it must be one the host can run.
  if (const char* forced = std::getenv("EJK_CPU_TARGET"); forced && *forced) {
    for (const auto& t : targets) {
      if (t.name != forced) continue;
      for (const auto& f : t.requires_features)
        if (!host_has(f))
          throw BackendUnavailable(fmt::format("EJK_CPU_TARGET={}: this CPU lacks {}", forced, f));
      return t.name;
    }
    std::vector<std::string> names;
    for (const auto& t : targets) names.push_back(t.name);
    throw InvalidArgument(fmt::format("EJK_CPU_TARGET={}: expected one of {}", forced, fmt::join(names, ", ")));
  }
  for (const auto& t : targets) {
    bool ok = true;
    for (const auto& f : t.requires_features) ok = ok && host_has(f);
    if (ok) return t.name;
  }
  throw BackendUnavailable(fmt::format("{}: no CPU target of the spec runs on this host", schema.file()));
}

CpuVariant acquire_cpu_variant(const OpSchema& schema, const VariantKey& key) {
  static std::mutex mu;
  static std::map<std::string, CpuVariant> loaded;
  std::string k = to_string(key);
  {
    std::lock_guard lk(mu);
    if (auto it = loaded.find(k); it != loaded.end()) return it->second;
  }
  // Built outside the lock: a compile must not stall other variants' lookups.
  CpuVariant v = build_or_load(schema, key);
  std::lock_guard lk(mu);
  return loaded.emplace(k, v).first->second;
}

void run_cpu_tasks(generated::CpuTaskFn fn, const void* params, long long num_tasks) {
  ThreadPool::global().parallel_for(num_tasks, 1, [&](int64_t b, int64_t e) { fn(params, b, e); });
}

}  // namespace ejk::detail
