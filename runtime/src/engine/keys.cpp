#include "engine/keys.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "ejk/core/error.h"
#include "ejk/core/expr.h"
#include "engine/host_cpu.h"
#if EJK_HAVE_CUDA
#include "cuda/device.h"
#endif

namespace ejk::engine {
namespace {

void set_axis(VariantKey& key, const AxisDef& a, int64_t v) {
  switch (a.kind) {
    case AxisKind::Int: key.set_int(a.name, v); break;
    case AxisKind::Flag: key.set_flag(a.name, v != 0); break;
    case AxisKind::Enum:
      if (v < 0 || v >= int64_t(a.enum_values.size()))
        throw InvalidArgument(fmt::format("axis {}: value index {} out of range", a.name, v));
      key.set_enum(a.name, a.enum_values[v]);
      break;
  }
}

std::map<std::string, int64_t> problem_vars(const OpSchema& s, const VariantKey& key, const ProblemValues& given) {
  const std::map<std::string, int64_t> axis_vars = s.constraint_vars(key);
  std::map<std::string, int64_t> vars;
  const auto& defs = s.problem_vars();
  for (size_t i = 0; i < defs.size(); ++i) {
    const ProblemVarDef& p = defs[i];
    if (!p.expr.empty())
      vars[p.name] = eval_expr(p.expr, axis_vars, fmt::format("{}:{}: problem.{}", s.file(), p.line, p.name));
    else if (!p.has_default)
      vars[p.name] = axis_vars.at(p.name);
    else
      vars[p.name] = (given.set >> i) & 1u ? given.value[i] : p.default_value;
  }
  return vars;
}

// `sm_80`: compute capability 8.0 or newer (its code is compiled for the device's own arch where
// the built-in cubin does not load there); `sm_90a`: exactly 9.0 (arch-specific code).
bool device_meets(const std::string& req, int major, int minor) {
  std::string_view r = req;
  if (!r.starts_with("sm_") || r.size() < 5) return false;
  const bool exact = r.ends_with('a');
  const int want = std::stoi(std::string(r.substr(3, r.size() - 3 - (exact ? 1 : 0))));
  const int have = major * 10 + minor;
  return exact ? have == want : have >= want;
}

const std::string& pick_target(const OpSchema& s, Backend backend, Device device) {
  if (backend == Backend::cpu) return host_cpu_target(s.backend("cpu").targets);
#if EJK_HAVE_CUDA
  if (backend == Backend::cuda) {
    const cuda::DeviceInfo& dev = cuda::use_device(device.index);
    if (const TargetDef* t = cuda_target_for(s, dev.major, dev.minor)) return t->name;
    throw BackendUnavailable(fmt::format("{}: no CUDA target of {} runs on {} (compute capability {}.{})", s.api(),
                                         s.file(), dev.name, dev.major, dev.minor));
  }
#endif
  (void)device;
  throw BackendUnavailable(fmt::format("{}: this build has no {} backend", s.api(), backend_name(backend)));
}

}  // namespace

const TargetDef* cuda_target_for(const OpSchema& s, int major, int minor) {
  for (const TargetDef& t : s.backend("cuda").targets) {
    bool ok = true;
    for (const std::string& r : t.requires_features) ok = ok && device_meets(r, major, minor);
    if (ok) return &t;
  }
  return nullptr;
}

const TargetDef* cpu_target_for(const OpSchema& s, const std::vector<std::string>& features) {
  for (const TargetDef& t : s.backend("cpu").targets)
    if (std::all_of(t.requires_features.begin(), t.requires_features.end(), [&](const std::string& f) {
          return std::find(features.begin(), features.end(), f) != features.end();
        }))
      return &t;
  return nullptr;
}

AxisValues axis_values(const Bound& b) {
  AxisValues v;
  const OpSchema& s = b.op->schema();
  for (size_t i = 0; i < s.axes().size(); ++i) {
    const AxisDef& a = s.axes()[i];
    if (a.kind == AxisKind::Flag && !a.tuning) v.put(int(i), (b.flags >> i) & 1u);
    if (a.kind == AxisKind::Int && !a.from.empty()) v.put(int(i), b.size(b.op->symbol(a.from)));
    if (a.kind == AxisKind::Int && b.args->tuning[i] != 0) v.put(int(i), b.args->tuning[i]);
    if (a.kind == AxisKind::Enum) v.put(int(i), s.enum_index(a.name, dtype_name(b.dtype)));
  }
  return v;
}

VariantKey make_key(const OpSchema& s, std::string_view backend, std::string_view target, const AxisValues& axes,
                    const ProblemValues& problem) {
  VariantKey key = s.blank_key(backend, target);
  for (size_t i = 0; i < s.axes().size(); ++i)
    if (axes.has(int(i))) set_axis(key, s.axes()[i], axes.value[i]);
  std::map<std::string, int64_t> chosen = s.choose_config(backend, target, problem_vars(s, key, problem));
  bool caller_tuned = false;
  for (const auto& [name, value] : chosen) {
    const AxisDef& a = s.axis(name);
    caller_tuned = caller_tuned || (a.kind == AxisKind::Int && axes.has(int(&a - s.axes().data())));
  }
  for (const auto& [name, value] : chosen) {
    const AxisDef& a = s.axis(name);
    const bool fixed = axes.has(int(&a - s.axes().data()));
    if (a.kind == AxisKind::Flag && a.tuning && !caller_tuned && !fixed) key.set_flag(name, value != 0);
    if (a.kind == AxisKind::Int && !fixed) key.set_int(name, value);
  }
  s.validate(key);
  return key;
}

const std::string& target_for(const OpSchema& s, Backend backend, Device device) {
  // The CPU's is read per call: EJK_CPU_TARGET may change between calls (tests, benchmarks),
  // and the host's features are a static table.
  if (backend == Backend::cpu) return host_cpu_target(s.backend("cpu").targets);
  static std::mutex mu;
  static std::map<std::tuple<const OpSchema*, Backend, int>, const std::string*> memo;
  const auto id = std::make_tuple(&s, backend, device.index);
  {
    std::lock_guard lk(mu);
    if (auto it = memo.find(id); it != memo.end()) return *it->second;
  }
  const std::string& t = pick_target(s, backend, device);
  std::lock_guard lk(mu);
  return *memo.emplace(id, &t).first->second;
}

}  // namespace ejk::engine
