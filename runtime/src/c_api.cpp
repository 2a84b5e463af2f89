// The C ABI over the C++ API: converts descriptors, catches every exception at the boundary.
#include "ejk/ejk.h"

#include <fmt/format.h>

#include <string>

#include "ejk/core/error.h"
#include "ejk/flash_attention.h"

namespace {

thread_local std::string g_last_error;

ejk::TensorView to_view(const ejk_tensor& t, const char* name) {
  if (t.rank < 0 || t.rank > 8 || (t.rank > 0 && !t.shape))
    throw ejk::InvalidArgument(fmt::format("{}: rank must be 0..8 with a shape array, got {}", name, t.rank));
  if (t.dtype < EJK_F32 || t.dtype > EJK_U8)
    throw ejk::InvalidArgument(fmt::format("{}: unknown dtype code {}", name, t.dtype));
  if (t.device_kind < EJK_DEVICE_CPU || t.device_kind > EJK_DEVICE_HIP)
    throw ejk::InvalidArgument(fmt::format("{}: unknown device kind {}", name, t.device_kind));
  ejk::TensorView v;
  v.data = t.data;
  v.dtype = static_cast<ejk::DType>(t.dtype);
  v.device = {static_cast<ejk::DeviceKind>(t.device_kind), t.device_index};
  v.shape.assign(t.shape, t.shape + t.rank);
  v.strides = t.strides ? std::vector<int64_t>(t.strides, t.strides + t.rank) : ejk::contiguous_strides(v.shape);
  return v;
}

std::optional<ejk::TensorView> opt_view(const ejk_tensor* t, const char* name) {
  if (!t) return std::nullopt;
  return to_view(*t, name);
}

template <class F>
int guarded(F&& f) {
  try {
    f();
    g_last_error.clear();
    return EJK_OK;
  } catch (const ejk::InvalidArgument& e) {
    g_last_error = e.what();
    return EJK_INVALID_ARGUMENT;
  } catch (const ejk::CompileError& e) {
    g_last_error = e.what();
    return EJK_COMPILE_ERROR;
  } catch (const ejk::BackendUnavailable& e) {
    g_last_error = e.what();
    return EJK_BACKEND_UNAVAILABLE;
  } catch (const std::exception& e) {
    g_last_error = e.what();
    return EJK_INTERNAL_ERROR;
  } catch (...) {
    g_last_error = "unknown exception";
    return EJK_INTERNAL_ERROR;
  }
}

}  // namespace

extern "C" void ejk_flash_options_init(ejk_flash_options* opt) {
  *opt = ejk_flash_options{};
  opt->normalize_output = 1;
}

extern "C" int ejk_flash_attention(const ejk_tensor* q, const ejk_tensor* k, const ejk_tensor* v,
                                   const ejk_tensor* bias, const ejk_tensor* q_segment_ids,
                                   const ejk_tensor* kv_segment_ids, const ejk_tensor* cum_seqlens_q,
                                   const ejk_tensor* cum_seqlens_k, const ejk_tensor* softmax_aux,
                                   const ejk_flash_options* opt, const ejk_tensor* out,
                                   const ejk_tensor* lse) {
  return guarded([&] {
    if (!q || !k || !v || !out || !lse) throw ejk::InvalidArgument("ejk_flash_attention: q, k, v, out and lse are required");
    ejk::FlashAttentionInputs in;
    in.q = to_view(*q, "q");
    in.k = to_view(*k, "k");
    in.v = to_view(*v, "v");
    in.bias = opt_view(bias, "bias");
    in.q_segment_ids = opt_view(q_segment_ids, "q_segment_ids");
    in.kv_segment_ids = opt_view(kv_segment_ids, "kv_segment_ids");
    in.cum_seqlens_q = opt_view(cum_seqlens_q, "cum_seqlens_q");
    in.cum_seqlens_k = opt_view(cum_seqlens_k, "cum_seqlens_k");
    in.softmax_aux = opt_view(softmax_aux, "softmax_aux");
    ejk_flash_options o;
    if (opt) o = *opt; else ejk_flash_options_init(&o);
    ejk::FlashAttentionOptions cpp;
    if (o.has_softmax_scale) cpp.softmax_scale = o.softmax_scale;
    cpp.causal = o.causal != 0;
    if (o.has_window) cpp.sliding_window = ejk::SlidingWindow{o.window_left, o.window_right};
    if (o.logits_soft_cap > 0) cpp.logits_soft_cap = o.logits_soft_cap;
    cpp.normalize_output = o.normalize_output != 0;
    if (o.backend < EJK_BACKEND_AUTO || o.backend > EJK_BACKEND_HIP)
      throw ejk::InvalidArgument(fmt::format("backend: unknown code {}", o.backend));
    cpp.backend = static_cast<ejk::Backend>(o.backend);
    cpp.block_q = o.block_q;
    cpp.block_k = o.block_k;
    ejk::flash_attention_into(in, cpp, to_view(*out, "out"), to_view(*lse, "lse"));
  });
}

extern "C" const char* ejk_last_error(void) { return g_last_error.c_str(); }
