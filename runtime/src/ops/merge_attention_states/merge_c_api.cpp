// merge_attention_states's C function: descriptors into the typed C++ call.
#include "api/c_support.h"
#include "ejk/core/error.h"
#include "ejk/ejk.h"
#include "ejk/ops/merge_attention_states.h"

using namespace ejk;

extern "C" int ejk_merge_attention_states(const ejk_context* ctx, const ejk_tensor* out_a, const ejk_tensor* lse_a,
                                          const ejk_tensor* out_b, const ejk_tensor* lse_b, const ejk_tensor* out,
                                          const ejk_tensor* lse) {
  return capi::guarded([&] {
    if (!out_a || !lse_a || !out_b || !lse_b || !out || !lse)
      throw InvalidArgument("ejk_merge_attention_states: out_a, lse_a, out_b, lse_b, out and lse are required");
    CpuExecutor executor;
    merge_attention_states_into(capi::to_view(*out_a, "out_a"), capi::to_view(*lse_a, "lse_a"),
                                capi::to_view(*out_b, "out_b"), capi::to_view(*lse_b, "lse_b"),
                                capi::to_view(*out, "out"), capi::to_view(*lse, "lse"), capi::to_context(ctx, executor));
  });
}
