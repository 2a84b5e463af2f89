// mean_pooling's C functions: descriptors into the typed C++ calls.
#include <optional>

#include "api/c_support.h"
#include "ejk/core/error.h"
#include "ejk/ejk.h"
#include "ejk/ops/mean_pooling.h"

using namespace ejk;

namespace {

std::optional<TensorView> optional_view(const ejk_tensor* t, const char* name) {
  if (!t) return std::nullopt;
  return capi::to_view(*t, name);
}

}  // namespace

extern "C" int ejk_mean_pooling(const ejk_context* ctx, const ejk_tensor* x, const ejk_tensor* cu_seqlens,
                                const ejk_tensor* out) {
  return capi::guarded([&] {
    if (!x || !out) throw InvalidArgument("ejk_mean_pooling: x and out are required");
    CpuExecutor executor;
    mean_pooling_into(capi::to_view(*x, "x"), optional_view(cu_seqlens, "cu_seqlens"), capi::to_view(*out, "out"),
                      capi::to_context(ctx, executor));
  });
}

extern "C" int ejk_mean_pooling_backward(const ejk_context* ctx, const ejk_tensor* g, const ejk_tensor* cu_seqlens,
                                         const ejk_tensor* dx) {
  return capi::guarded([&] {
    if (!g || !dx) throw InvalidArgument("ejk_mean_pooling_backward: g and dx are required");
    CpuExecutor executor;
    mean_pooling_backward_into(capi::to_view(*g, "g"), optional_view(cu_seqlens, "cu_seqlens"),
                               capi::to_view(*dx, "dx"), capi::to_context(ctx, executor));
  });
}
