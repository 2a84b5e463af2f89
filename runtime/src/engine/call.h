// A call through the engine: bind the arguments, find the plan (key and loaded variant, cached
// by what determines them), run it on the CPU or launch it on the stream.
#pragma once
#include <memory>
#include <new>
#include <type_traits>
#include <string>
#include <vector>

#include "engine/keys.h"
#include "engine/op_def.h"
#include "engine/variant_store.h"

namespace ejk::engine {

// What a call needs besides its arguments' pointers: the variant's key, the loaded variant and
// its companions. The same for every call with the same key inputs (backend, device, axis
// values, problem variables), and cached by them.
struct PlanData {
  const OpDef* op = nullptr;
  Backend backend = Backend::cpu;
  Device device{};
  VariantKey key;
  std::string key_string;
  Variant main;
  std::vector<Variant> companions;  // the op's companions(key), in its order
  AxisValues axes;                  // what the key was built from
  ProblemValues problem;
  bool tuned = false;               // the key is the tuning store's, not the heuristic's
  bool autotune = false;            // EJK_AUTOTUNE, and no record: call() measures the candidates
  alignas(16) unsigned char facts[OpDef::kFactBytes] = {};  // OpDef::plan_facts

  template <class T>
  const T& facts_as() const {
    static_assert(sizeof(T) <= OpDef::kFactBytes && alignof(T) <= 16 && std::is_trivially_copyable_v<T>);
    return *std::launder(reinterpret_cast<const T*>(facts));
  }
  RunInfo info() const;
};

// The backend a call on `device` runs on; InvalidArgument when ctx names another.
Backend resolve_backend(const OpDef& op, Device device, Backend wanted);

// The plan of a bound call on `backend` (memoized). `load`: acquire the variants (a compile on a
// miss); false only checks and builds the key.
std::shared_ptr<const PlanData> plan_for(const Bound& b, Backend backend, bool load = true);

// Fills a plan whose op, backend, device, key, axes and problem are set: its key string, the
// op's plan facts and (load) its variants.
void finish_plan(PlanData& p, bool load);

// Puts `p` (an autotuned plan of b's problem) in place of the memoized plan of its problem.
void replace_plan(const Bound& b, std::shared_ptr<const PlanData> p);

// Where the tuning store files a bound call's problem: the heuristic's key (the call must give
// no tuning values), the device's fingerprint and the problem class (tuning_store.h).
struct TuningSlot {
  VariantKey heuristic;
  std::string fingerprint, cls;
};
TuningSlot tuning_slot(const Bound& b, Backend backend);

// Whether a bound call has the key inputs `plan` was built from (ejk::Plan::run checks it).
bool plan_matches(const Bound& b, Backend backend, const PlanData& plan);

// Runs a bound call with its plan: CPU tasks on ctx's executor or our pool, CUDA launches on
// ctx.stream.
void execute(const Bound& b, const PlanData& plan, const Context& ctx);

// bind + plan_for + execute; with EJK_AUTOTUNE=1, the first call of a problem class without a
// tuning record first times the spec's candidate configs on its own arguments (engine/autotune.cpp).
RunInfo call(const OpDef& op, const ArgPack& args, const Context& ctx);

}  // namespace ejk::engine
