// flash_attention's C function: descriptors into the typed C++ call.
#include "api/c_support.h"
#include "ejk/core/error.h"
#include "ejk/ejk.h"
#include "ejk/ops/flash_attention.h"

using namespace ejk;

extern "C" void ejk_flash_options_init(ejk_flash_options* opt) {
  *opt = ejk_flash_options{};
  opt->struct_size = sizeof(ejk_flash_options);
  opt->normalize_output = 1;
  opt->max_seqlen_q = opt->max_seqlen_k = -1;
}

extern "C" int ejk_flash_attention(const ejk_context* ctx, const ejk_tensor* q, const ejk_tensor* k,
                                   const ejk_tensor* v, const ejk_tensor* bias, const ejk_tensor* q_segment_ids,
                                   const ejk_tensor* kv_segment_ids, const ejk_tensor* cum_seqlens_q,
                                   const ejk_tensor* cum_seqlens_k, const ejk_tensor* softmax_aux,
                                   const ejk_flash_options* opt, const ejk_tensor* out, const ejk_tensor* lse) {
  return capi::guarded([&] {
    if (!q || !k || !v || !out || !lse)
      throw InvalidArgument("ejk_flash_attention: q, k, v, out and lse are required");
    auto optional = [](const ejk_tensor* t, const char* name) -> std::optional<TensorView> {
      if (!t) return std::nullopt;
      return capi::to_view(*t, name);
    };
    FlashAttentionInputs in{capi::to_view(*q, "q"), capi::to_view(*k, "k"), capi::to_view(*v, "v"),
                            optional(bias, "bias"), optional(q_segment_ids, "q_segment_ids"),
                            optional(kv_segment_ids, "kv_segment_ids"), optional(cum_seqlens_q, "cum_seqlens_q"),
                            optional(cum_seqlens_k, "cum_seqlens_k"), optional(softmax_aux, "softmax_aux")};
    ejk_flash_options o;
    ejk_flash_options_init(&o);
    if (opt) capi::read_versioned(opt, &o, sizeof(o), "ejk_flash_options");
    FlashAttentionOptions cpp;
    if (o.has_softmax_scale) cpp.softmax_scale = o.softmax_scale;
    cpp.causal = o.causal != 0;
    if (o.has_window) cpp.sliding_window = SlidingWindow{o.window_left, o.window_right};
    if (o.logits_soft_cap > 0) cpp.logits_soft_cap = o.logits_soft_cap;
    cpp.normalize_output = o.normalize_output != 0;
    if (o.max_seqlen_q >= 0) cpp.max_seqlen_q = o.max_seqlen_q;
    if (o.max_seqlen_k >= 0) cpp.max_seqlen_k = o.max_seqlen_k;
    cpp.block_q = o.block_q;
    cpp.block_k = o.block_k;
    CpuExecutor executor;
    flash_attention_into(in, cpp, capi::to_view(*out, "out"), capi::to_view(*lse, "lse"),
                         capi::to_context(ctx, executor));
  });
}
