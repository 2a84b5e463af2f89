// This host's CPU as the specs' CPU targets see it.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "ejk/core/schema.h"

namespace ejk::engine {

// Whether the host has a CPU feature a spec's target requires ("avx512f", "amx-tile", ...).
// InvalidArgument for a feature the runtime cannot test.
bool host_has(std::string_view feature);

// The first of `targets` (the spec lists them fastest first) whose features the host has, or
// the one EJK_CPU_TARGET names (which the host must support). BackendUnavailable when none.
const std::string& host_cpu_target(const std::vector<TargetDef>& targets);

}  // namespace ejk::engine
