// The variant key, built in one place for run, `ejk compile` and `ejk list`: the axis values
// the arguments (or a compile request) give, the problem variables, the spec's heuristic for the
// rest, and the spec's validation.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "engine/op_def.h"

namespace ejk::engine {

// Axis values by the spec's axis order (enums as their position); `given` marks those the
// caller fixed (the others come from the heuristic or stay at the blank key's value).
struct AxisValues {
  int64_t value[kMaxAxes] = {};
  uint32_t given = 0;
  void put(int i, int64_t v) { value[i] = v, given |= 1u << i; }
  bool has(int i) const { return (given >> i) & 1u; }
};

// The axis values a bound call fixes: its dtype, the sizes named by `from`, its flags, and the
// caller's tuning values.
AxisValues axis_values(const Bound& b);

// The key for `axes` and `problem` on backend/target. Problem variables the spec derives
// (an axis of the same name, an expr) are computed; those the op supplies come from `problem`,
// else from their spec default. Tuning flags come with the heuristic's choice only when the
// caller fixed none of the axes that choice sets. InvalidArgument when the key is outside the
// spec (naming the axis and the allowed values).
VariantKey make_key(const OpSchema& schema, std::string_view backend, std::string_view target,
                    const AxisValues& axes, const ProblemValues& problem);

// The spec target a backend runs for `device`: CPU, the first target whose features the host
// has (EJK_CPU_TARGET narrows); CUDA, the first whose `requires` the device's compute capability
// meets (`sm_80`: 8.0 or newer, compiled for the device's arch where needed: see
// variant_store.h; `sm_90a`: exactly 9.0). BackendUnavailable when none does.
const std::string& target_for(const OpSchema& schema, Backend backend, Device device);

// The target target_for would pick without a device at hand (`ejk bundle build`): for a CUDA
// device of compute capability major.minor, or for a CPU with exactly `features` (the spec
// names of its target's `requires`); nullptr when no target of the spec runs there.
const TargetDef* cuda_target_for(const OpSchema& schema, int major, int minor);
const TargetDef* cpu_target_for(const OpSchema& schema, const std::vector<std::string>& features);

}  // namespace ejk::engine
