#include "engine/host_cpu.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <map>

#include <sys/syscall.h>
#include <unistd.h>

#include "ejk/core/error.h"
#include "util/env.h"

namespace ejk::engine {
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

bool supports(const TargetDef& t) {
  for (const auto& f : t.requires_features)
    if (!host_has(f)) return false;
  return true;
}

}  // namespace

bool host_has(std::string_view feature) {
  __builtin_cpu_init();
  // __builtin_cpu_supports needs literal names, hence a table.
  static const std::map<std::string_view, bool> kHost = {
      {"avx512f", __builtin_cpu_supports("avx512f")},   {"avx512bw", __builtin_cpu_supports("avx512bw")},
      {"avx512vl", __builtin_cpu_supports("avx512vl")}, {"avx512dq", __builtin_cpu_supports("avx512dq")},
      {"avx512bf16", __builtin_cpu_supports("avx512bf16")},
      {"amx-tile", __builtin_cpu_supports("amx-tile") && os_grants_amx_tiles()},
      {"amx-bf16", __builtin_cpu_supports("amx-bf16")}, {"avx2", __builtin_cpu_supports("avx2")},
      {"fma", __builtin_cpu_supports("fma")},           {"f16c", __builtin_cpu_supports("f16c")},
      {"sse4.2", __builtin_cpu_supports("sse4.2")},
  };
  auto it = kHost.find(feature);
  if (it == kHost.end())
    throw InvalidArgument(fmt::format("spec names CPU feature '{}', which this runtime cannot test (known: "
                                      "avx512f/bw/vl/dq/bf16, amx-tile, amx-bf16, avx2, fma, f16c, sse4.2)", feature));
  return it->second;
}

const std::string& host_cpu_target(const std::vector<TargetDef>& targets) {
  // EJK_CPU_TARGET forces a narrower target (to test or benchmark avx2 code on an AVX-512
  // machine); it must be one the host can run.
  if (const auto value = util::env_string("EJK_CPU_TARGET")) {
    const char* forced = value->c_str();
    for (const auto& t : targets) {
      if (t.name != forced) continue;
      for (const auto& f : t.requires_features)
        if (!host_has(f)) throw BackendUnavailable(fmt::format("EJK_CPU_TARGET={}: this CPU lacks {}", forced, f));
      return t.name;
    }
    std::vector<std::string> names;
    for (const auto& t : targets) names.push_back(t.name);
    throw InvalidArgument(fmt::format("EJK_CPU_TARGET={}: expected one of {}", forced, fmt::join(names, ", ")));
  }
  for (const auto& t : targets)
    if (supports(t)) return t.name;
  throw BackendUnavailable("no CPU target of the spec runs on this host");
}

}  // namespace ejk::engine
