#include "engine/autotune.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "ejk/core/error.h"
#include "ejk/tensor.h"
#include "engine/keys.h"
#include "engine/tuning_store.h"
#if EJK_HAVE_CUDA
#include "cuda/cuda_driver.h"
#endif

namespace ejk::engine {
namespace {

constexpr int kTimedRuns = 5;  // median of these, after one warm-up run

// Whether repeated runs leave the same result and may synchronize the stream.
bool measurable(const Bound& b, const Context& ctx) {
  const auto& tensors = b.op->schema().tensors();
  for (size_t o = 0; o < tensors.size(); ++o) {
    if (!tensors[o].output || !b.has(int(o))) continue;
    for (size_t i = 0; i < tensors.size(); ++i)
      if (!tensors[i].output && b.has(int(i)) && b.data(int(i)) == b.data(int(o))) return false;
  }
#if EJK_HAVE_CUDA
  if (b.device.kind == DeviceKind::cuda) {
    const cuda::CudaDriver& d = cuda::CudaDriver::get();
    int capturing = 0;
    d.check(d.cuStreamIsCapturing(static_cast<cuda::CUstream>(ctx.stream), &capturing), "cuStreamIsCapturing");
    if (capturing != 0) return false;
  }
#else
  (void)ctx;
#endif
  return true;
}

// The heuristic's key, then each of the backend's configs the spec takes for this problem.
std::vector<VariantKey> candidates(const PlanData& untuned) {
  const OpSchema& s = untuned.op->schema();
  const std::string backend(backend_name(untuned.backend));
  std::vector<VariantKey> out{untuned.key};
  for (const auto& config : s.backend(backend).configs) {
    AxisValues axes = untuned.axes;
    for (const auto& [axis, value] : config)
      for (size_t i = 0; i < s.axes().size(); ++i)
        if (s.axes()[i].name == axis) axes.put(int(i), value);
    try {
      VariantKey k = make_key(s, backend, untuned.key.target, axes, untuned.problem);
      if (std::find(out.begin(), out.end(), k) == out.end()) out.push_back(std::move(k));
    } catch (const InvalidArgument&) {  // a config the spec's constraints refuse for this problem
    }
  }
  return out;
}

std::shared_ptr<PlanData> plan_with(const PlanData& untuned, VariantKey key, bool tuned) {
  auto p = std::make_shared<PlanData>();
  p->op = untuned.op, p->backend = untuned.backend, p->device = untuned.device;
  p->axes = untuned.axes, p->problem = untuned.problem;
  p->key = std::move(key);
  p->tuned = tuned;
  finish_plan(*p, true);
  return p;
}

double median_ms(const Bound& b, const PlanData& p, const Context& ctx) {
  using Clock = std::chrono::steady_clock;
  execute(b, p, ctx);
  synchronize(b.device, ctx.stream);
  std::vector<double> ms;
  for (int i = 0; i < kTimedRuns; ++i) {
    const auto t0 = Clock::now();
    execute(b, p, ctx);
    synchronize(b.device, ctx.stream);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::nth_element(ms.begin(), ms.begin() + kTimedRuns / 2, ms.end());
  return ms[kTimedRuns / 2];
}

}  // namespace

std::shared_ptr<const PlanData> autotuned(const Bound& b, std::shared_ptr<const PlanData> untuned, const Context& ctx) {
  const OpSchema& s = b.op->schema();
  const TuningSlot slot = tuning_slot(b, untuned->backend);
  // Another thread (or process) may have measured this class since the plan was made.
  if (auto stored = tuning::lookup(s, slot.fingerprint, slot.cls, slot.heuristic)) {
    auto p = plan_with(*untuned, std::move(*stored), true);
    replace_plan(b, p);
    return p;
  }
  if (!measurable(b, ctx)) return untuned;
  std::shared_ptr<PlanData> best;
  double best_ms = 0, heuristic_ms = 0;
  for (VariantKey& key : candidates(*untuned)) {
    const bool heuristic = key == untuned->key;
    std::shared_ptr<PlanData> p;
    double ms = 0;
    try {
      p = plan_with(*untuned, std::move(key), !heuristic);
      ms = median_ms(b, *p, ctx);
    } catch (const InvalidArgument&) {  // the op's own checks refuse this config here
      continue;
    } catch (const CompileError&) {  // not built in, and no JIT to build it
      continue;
    }
    if (heuristic) heuristic_ms = ms;
    if (best == nullptr || ms < best_ms) best = std::move(p), best_ms = ms;
  }
  if (best == nullptr) return untuned;
  try {
    tuning::store(s, {{}, s.op(), slot.fingerprint, slot.cls, best->key_string, best_ms, heuristic_ms, {}});
  } catch (const Error&) {  // a read-only store: the winner still serves this process
  }
  replace_plan(b, best);
  return best;
}

}  // namespace ejk::engine
