#include "engine/call.h"

#include <fmt/format.h>

#include <cstring>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "bundle/bundle_set.h"
#include "cache/disk_cache.h"
#include "cache/get_or_build.h"
#include "ejk/core/error.h"
#include "engine/autotune.h"
#include "engine/bind.h"
#include "engine/keys.h"
#include "engine/tuning_store.h"
#include "registry.h"
#include "thread_pool.h"
#include "util/env.h"
#if EJK_HAVE_CUDA
#include "cuda/device.h"
#include "engine/cuda_exec.h"
#endif

namespace ejk::engine {
namespace {

// What a plan depends on, as plain bytes: hashed and compared without building a key string.
struct PlanId {
  const OpDef* op;
  const std::string* target;  // the spec's target for the device (EJK_CPU_TARGET may change it)
  int64_t backend, device;
  AxisValues axes;
  ProblemValues problem;
  bool operator==(const PlanId& o) const { return std::memcmp(this, &o, sizeof(PlanId)) == 0; }
};

static_assert(sizeof(PlanId) % sizeof(uint64_t) == 0);

struct PlanIdHash {
  size_t operator()(const PlanId& id) const {
    // A word at a time: a byte-wise hash of these few hundred bytes cost ~0.5 us per call.
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof(PlanId); i += sizeof(uint64_t)) {
      uint64_t w;
      std::memcpy(&w, reinterpret_cast<const unsigned char*>(&id) + i, sizeof(w));
      h = (h ^ w) * 0x9e3779b97f4a7c15ull;
      h ^= h >> 29;
    }
    return h;
  }
};

PlanId plan_id(const Bound& b, Backend backend) {
  PlanId id;
  std::memset(&id, 0, sizeof(id));  // padding too: the id is compared as bytes
  id.op = b.op;
  id.target = &target_for(b.op->schema(), backend, b.device);
  id.backend = int64_t(backend);
  id.device = b.device.kind == DeviceKind::cpu ? -1 : b.device.index;
  id.axes = axis_values(b);
  b.op->problem(b, id.problem);
  return id;
}

// Every EJK_* variable is read strictly when a plan is made, before any compile: garbage is an
// error naming it even where this call would not have read it (a cache hit never asks
// EJK_DISABLE_JIT), rather than a surprise later.
void check_environment() {
  cache::jit_disabled();
  cache::lock_timeout();
  ThreadPool::configured_threads();
  util::env_int("EJK_CPU_STAGE_KV", 0, 1, -1);
  tuning::enabled();
  tuning::autotune_enabled();
  bundle::use_environment();  // EJK_BUNDLE_PATH: read, and its bundles opened, once
}

bool caller_tuned(const OpSchema& s, const AxisValues& axes) {
  for (size_t i = 0; i < s.axes().size(); ++i)
    if (s.axes()[i].kind == AxisKind::Int && s.axes()[i].from.empty() && axes.has(int(i))) return true;
  return false;
}

// Where the tuning store files the problem `id` whose heuristic key is `heuristic`.
TuningSlot slot_of(const OpSchema& s, Backend backend, Device device, const PlanId& id, VariantKey heuristic) {
  TuningSlot slot{std::move(heuristic), tuning::fingerprint(backend, device, *id.target), {}};
  slot.cls = tuning::problem_class(s, slot.heuristic, id.problem);
  return slot;
}

std::shared_ptr<PlanData> make_plan(const Bound& b, Backend backend, const PlanId& id, bool load) {
  const OpSchema& s = b.op->schema();
  check_environment();
  auto p = std::make_shared<PlanData>();
  p->op = b.op;
  p->backend = backend;
  p->device = b.device;
  p->key = make_key(s, backend_name(backend), *id.target, id.axes, id.problem);
  // The tuning store's winner for this device and problem, unless the caller chose tuning values.
  if (!caller_tuned(s, id.axes) && tuning::enabled()) {
    const TuningSlot slot = slot_of(s, backend, b.device, id, p->key);
    if (auto t = tuning::lookup(s, slot.fingerprint, slot.cls, slot.heuristic)) p->key = std::move(*t), p->tuned = true;
    p->autotune = !p->tuned && tuning::autotune_enabled(b.op->name()) && !s.backend(backend_name(backend)).configs.empty();
  }
  p->axes = id.axes;
  p->problem = id.problem;
  finish_plan(*p, load);
  return p;
}

void run_tasks(generated::CpuTaskFn fn, const void* params, int64_t tasks, const CpuExecutor* exec) {
  if (tasks <= 0) return;
  if (tasks == 1) return fn(params, 0, 1);  // no thread hand-off for a single task
  if (exec != nullptr && exec->parallel_for != nullptr) {
    struct Job { generated::CpuTaskFn fn; const void* params; } job{fn, params};
    exec->parallel_for(exec->self, tasks, [](void* arg, int64_t b, int64_t e) {
      const Job& j = *static_cast<const Job*>(arg);
      j.fn(j.params, b, e);
    }, &job);
    return;
  }
  ThreadPool::global().parallel_for(tasks, 1, [&](int64_t b, int64_t e) { fn(params, b, e); });
}

}  // namespace

RunInfo PlanData::info() const {
  RunInfo r;
  r.key = key_string;
  r.backend = backend;
  r.source = main.source;
  r.compile_ms = main.compile_ms;
  r.load_ms = main.load_ms;
  r.tuned = tuned;
  return r;
}

TuningSlot tuning_slot(const Bound& b, Backend backend) {
  const OpSchema& s = b.op->schema();
  const PlanId id = plan_id(b, backend);
  if (caller_tuned(s, id.axes))
    throw InvalidArgument(fmt::format("{}: a tuning record is made for the heuristic's problem: give no tuning values",
                                      b.op->name()));
  return slot_of(s, backend, b.device, id, make_key(s, backend_name(backend), *id.target, id.axes, id.problem));
}

Backend resolve_backend(const OpDef& op, Device device, Backend wanted) {
  const Backend here = device.kind == DeviceKind::cpu ? Backend::cpu
                       : device.kind == DeviceKind::cuda ? Backend::cuda : Backend::hip;
  if (wanted != Backend::auto_ && wanted != here)
    throw InvalidArgument(fmt::format("{}: backend {} was requested, but the tensors are on {}{}", op.name(),
                                      backend_name(wanted), to_string(device),
                                      here == Backend::cpu ? "; move them to the device first" : ""));
  if (!op.schema().has_backend(backend_name(here)))
    throw BackendUnavailable(fmt::format("{}: no {} kernels (its spec {} has none)", op.name(), backend_name(here),
                                         op.schema().file()));
  return here;
}

namespace {

// The memoized plans. A thread calling one op with one shape back to back finds its plan in
// `last` (no hash, no lock). A plan never changes; an autotuned one replaces its untuned entry.
struct PlanCache {
  std::mutex mu;
  std::unordered_map<PlanId, std::shared_ptr<const PlanData>, PlanIdHash> plans;
  static constexpr size_t kMaxPlans = 4096;  // many distinct sequence lengths: start over, not grow
  static PlanCache& get() {
    static PlanCache c;
    return c;
  }
};
thread_local PlanId last_id;
thread_local std::shared_ptr<const PlanData> last;

std::shared_ptr<const PlanData> remember(const PlanId& id, std::shared_ptr<const PlanData> p, bool replace) {
  PlanCache& c = PlanCache::get();
  {
    std::lock_guard lk(c.mu);
    if (c.plans.size() >= PlanCache::kMaxPlans) c.plans.clear();
    auto [it, fresh] = c.plans.emplace(id, p);
    if (!fresh && replace) it->second = std::move(p);
    p = it->second;
  }
  last_id = id, last = p;
  return p;
}

}  // namespace

void finish_plan(PlanData& p, bool load) {
  const OpSchema& s = p.op->schema();
  p.key_string = to_string(p.key);
  p.op->plan_facts(p, p.facts);
  if (!load) return;
  p.main = acquire_variant(s, p.key, p.device);
  p.companions.clear();
  for (const VariantKey& c : p.op->companions(p.key))
    p.companions.push_back(acquire_variant(detail::op_schema(c.op), c, p.device));
}

std::shared_ptr<const PlanData> plan_for(const Bound& b, Backend backend, bool load) {
  const PlanId id = plan_id(b, backend);
  if (last != nullptr && last_id == id) return last;
  std::shared_ptr<const PlanData> p;
  {
    PlanCache& c = PlanCache::get();
    std::lock_guard lk(c.mu);
    if (auto it = c.plans.find(id); it != c.plans.end()) p = it->second;
  }
  if (p == nullptr) {
    p = make_plan(b, backend, id, load);
    if (!load) return p;
    p = remember(id, std::move(p), false);
  } else {
    last_id = id, last = p;
  }
  return p;
}

void replace_plan(const Bound& b, std::shared_ptr<const PlanData> p) {
  const PlanId id = plan_id(b, p->backend);
  remember(id, std::move(p), true);
}

bool plan_matches(const Bound& b, Backend backend, const PlanData& plan) {
  const PlanId id = plan_id(b, backend);
  return id.op == plan.op && *id.target == plan.key.target && backend == plan.backend && b.device == plan.device &&
         std::memcmp(&id.axes, &plan.axes, sizeof(AxisValues)) == 0 &&
         std::memcmp(&id.problem, &plan.problem, sizeof(ProblemValues)) == 0;
}

void execute(const Bound& bound, const PlanData& plan, const Context& ctx) {
  const OpDef& op = *bound.op;
  // The op's host-planned indices for this call, in a buffer of the calling thread (reused by
  // its next call; the call does not outlive it).
  std::optional<Bound> with_metadata;  // built only for such ops: a Bound is a few hundred bytes
  if (op.uses_plan_metadata()) {
    thread_local std::vector<unsigned char> blob;
    blob.clear();
    op.plan_metadata(bound, plan, blob);
    with_metadata.emplace(bound).metadata = &blob;
  }
  const Bound& b = with_metadata ? *with_metadata : bound;
  if (plan.backend == Backend::cpu) {
    alignas(64) unsigned char params[OpDef::kParamBytes];
    const CpuWork w = op.cpu_prepare(b, plan, params);
    run_tasks(plan.main.cpu, params, w.tasks, ctx.cpu_executor);
    return;
  }
#if EJK_HAVE_CUDA
  if (plan.backend == Backend::cuda) {
    const cuda::DeviceInfo& dev = cuda::use_device(b.device.index);
    auto stream = static_cast<cuda::CUstream>(ctx.stream);
    StreamWorkspace& ws = stream_workspace(dev.ordinal, stream);
    const OpDef::Workspace need = op.cuda_workspace(b, plan);
    ws.reserve(need.scratch_bytes, need.counter_bytes, stream);
    CudaLaunchContext lc(dev, stream, plan, ws);
    op.cuda_launch(b, plan, lc);
    return;
  }
#endif
  throw BackendUnavailable(fmt::format("{}: this build has no {} backend", op.name(), backend_name(plan.backend)));
}

RunInfo call(const OpDef& op, const ArgPack& args, const Context& ctx) {
  const Bound b = bind(op, args);
  op.check(b);
  const Backend backend = resolve_backend(op, b.device, ctx.backend);
  std::shared_ptr<const PlanData> plan = plan_for(b, backend);
  if (plan->autotune) plan = autotuned(b, plan, ctx);
  execute(b, *plan, ctx);
  return plan->info();
}

}  // namespace ejk::engine
