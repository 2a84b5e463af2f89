// In-process autotuning (EJK_AUTOTUNE=1): the first call of a problem class that has no tuning
// record times the spec's candidate configs for its backend (and the heuristic's key) on the
// call's own arguments, records the fastest in the tuning store (so later processes start from
// it) and replaces the memoized plan. The call then runs once more with the winner, so its
// outputs are the winner's. A call whose outputs share memory with its inputs (a merge or a
// state updated in place: repeated runs would change the result), or one issued while its stream
// is captured into a CUDA graph (nothing may synchronize it), runs the heuristic's plan without
// measuring; a later call of the class measures.
#pragma once
#include <memory>

#include "engine/call.h"

namespace ejk::engine {

std::shared_ptr<const PlanData> autotuned(const Bound& b, std::shared_ptr<const PlanData> untuned, const Context& ctx);

}  // namespace ejk::engine
