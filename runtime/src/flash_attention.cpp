// ejk::flash_attention: validate → variant key → backend.
#include "ejk/flash_attention.h"

#include <fmt/format.h>

#include <cstdlib>

#include "cpu_backend.h"
#include "cpu_kv_staging.h"
#include "ejk/core/error.h"
#include "device_memory.h"
#include "flash_dispatch.h"
#include "flash_validate.h"
#include "registry.h"

namespace ejk {

std::string_view backend_name(Backend b) {
  switch (b) {
    case Backend::auto_: return "auto";
    case Backend::cpu: return "cpu";
    case Backend::cuda: return "cuda";
    case Backend::hip: return "hip";
  }
  return "?";
}

Backend parse_backend(std::string_view s) {
  if (s == "auto") return Backend::auto_;
  if (s == "cpu") return Backend::cpu;
  if (s == "cuda") return Backend::cuda;
  if (s == "hip") return Backend::hip;
  throw InvalidArgument(fmt::format("backend: unknown '{}', expected auto, cpu, cuda or hip", s));
}

bool backend_available(Backend b, std::string* why) {
  switch (b) {
    case Backend::auto_:
    case Backend::cpu: return true;
    case Backend::cuda: return detail::cuda_usable(why);
    case Backend::hip:
      if (why) *why = "this build has no HIP backend";
      return false;
  }
  return false;
}

std::string_view source_name(VariantSource s) {
  switch (s) {
    case VariantSource::aot: return "aot";
    case VariantSource::cache: return "cache";
    case VariantSource::jit: return "jit";
  }
  return "?";
}

namespace detail {

VariantKey flash_key(const OpSchema& schema, const FlashProblem& pb, const FlashAttentionOptions& opt,
                     std::string_view backend, std::string_view target) {
  VariantKey key = schema.blank_key(backend, target);
  key.set_enum("dtype", std::string(dtype_name(pb.dtype)));
  key.set_int("head_dim", pb.params.head_dim);
  key.set_flag("causal", opt.causal);
  key.set_flag("window", pb.window);
  key.set_flag("segments", pb.segments);
  key.set_flag("softcap", pb.softcap);
  key.set_flag("sinks", pb.sinks);
  key.set_flag("bias", pb.bias);
  std::map<std::string, int64_t> problem{{"head_dim", pb.params.head_dim},
                                         {"seqlen_q", pb.params.seqlen_q},
                                         {"seqlen_k", pb.params.seqlen_k},
                                         {"causal", opt.causal ? 1 : 0},
                                         {"dtype_bytes", static_cast<int64_t>(dtype_size(pb.dtype))},
                                         {"extras", logit_extras(key)},
                                         {"bias", pb.bias ? 1 : 0}};
  auto chosen = schema.choose_config(backend, target, problem);
  key.set_int("block_q", opt.block_q ? opt.block_q : chosen.at("block_q"));
  key.set_int("block_k", opt.block_k ? opt.block_k : chosen.at("block_k"));
  if (!opt.block_q && !opt.block_k) set_tuning_flags(schema, key, chosen);
  schema.validate(key);
  return key;
}

void set_tuning_flags(const OpSchema& schema, VariantKey& key,
                      const std::map<std::string, int64_t>& chosen) {
  for (const AxisDef& a : schema.axes())
    if (a.tuning && chosen.contains(a.name) && chosen.at(a.name) != 0) key.set_flag(a.name, true);
}

int64_t logit_extras(const VariantKey& key) {
  int64_t n = 0;
  for (const char* flag : {"window", "segments", "softcap", "bias"}) n += key.get_flag(flag);
  return n;
}

void require_variant_covers(const VariantKey& key, const FlashFwdParams& p) {
  // Kernels compiled without the segments flag have no segment code: ids would be ignored.
  if ((p.q_segment_ids || p.kv_segment_ids) && !key.get_flag("segments"))
    throw InvalidArgument(fmt::format("flash_attention: segment ids are given, but variant {} was "
                                      "compiled without segments (its key needs .{})",
                                      to_string(key), key.axis("segments").token));
}

RunInfo run_flash_cpu(FlashProblem& pb, const FlashAttentionOptions& opt) {
  const OpSchema& schema = op_schema("flash_fwd");
  VariantKey key = flash_key(schema, pb, opt, "cpu", host_cpu_target(schema));
  require_variant_covers(key, pb.params);
  CpuVariant v = acquire_cpu_variant(schema, key);
  pb.params.softmax_aux = pb.sinks ? pb.sinks_f32.data() : nullptr;
  const int64_t block_q = key.get_int("block_q");
  if (kv_staging_wanted(pb.params, block_q)) stage_kv_head_major(pb.params, pb.dtype);
  run_cpu_tasks(v.fn, &pb.params, flash_fwd_num_tasks(pb.params, block_q));
  RunInfo info;
  info.key = to_string(key);
  info.backend = Backend::cpu;
  info.source = v.source;
  info.compile_ms = v.compile_ms;
  info.load_ms = v.load_ms;
  return info;
}

}  // namespace detail

namespace {

RunInfo dispatch(detail::FlashProblem& pb, const FlashAttentionOptions& opt) {
  Backend wanted = opt.backend;
  switch (pb.device.kind) {
    case DeviceKind::cpu:
      if (wanted != Backend::auto_ && wanted != Backend::cpu)
        throw InvalidArgument(fmt::format("backend: {} was requested, but q is on the CPU; "
                                          "move the tensors to the device first", backend_name(wanted)));
      return detail::run_flash_cpu(pb, opt);
    case DeviceKind::cuda:
      if (wanted != Backend::auto_ && wanted != Backend::cuda)
        throw InvalidArgument(fmt::format("backend: {} was requested, but q is on {}",
                                          backend_name(wanted), to_string(pb.device)));
#if EJK_HAVE_CUDA
      return detail::run_flash_cuda(pb, opt);
#else
      throw BackendUnavailable("flash_attention: q is on a CUDA device, but this build has no CUDA "
                               "backend (configured with EJK_ENABLE_CUDA=OFF)");
#endif
    case DeviceKind::hip:
      break;
  }
  throw BackendUnavailable(fmt::format("flash_attention: no backend for tensors on {} in this build",
                                       to_string(pb.device)));
}

}  // namespace

RunInfo flash_attention_into(const FlashAttentionInputs& in, const FlashAttentionOptions& opt,
                             const TensorView& out, const TensorView& lse) {
  detail::FlashProblem pb = detail::check_flash_inputs(in, opt);
  detail::bind_flash_outputs(pb, out, lse);
  return dispatch(pb, opt);
}

FlashAttentionResult flash_attention(const FlashAttentionInputs& in, const FlashAttentionOptions& opt) {
  detail::FlashProblem pb = detail::check_flash_inputs(in, opt);
  FlashAttentionResult r;
  r.out = Tensor::empty(pb.out_shape, pb.dtype, pb.device);
  r.lse = Tensor::empty(pb.lse_shape, DType::f32, pb.device);
  detail::bind_flash_outputs(pb, r.out.view(), r.lse.view());
  r.info = dispatch(pb, opt);
  return r;
}

}  // namespace ejk

#include "ejk/reference.h"

namespace ejk {

FlashAttentionReference flash_attention_reference(const FlashAttentionInputs& in,
                                                  const FlashAttentionOptions& opt) {
  detail::FlashProblem pb = detail::check_flash_inputs(in, opt);
  if (pb.device.kind != DeviceKind::cpu)
    throw InvalidArgument("flash_attention_reference: inputs must be CPU tensors");
  pb.params.softmax_aux = pb.sinks ? pb.sinks_f32.data() : nullptr;
  FlashAttentionReference r;
  int64_t n_out = 1, n_lse = 1;
  for (int64_t s : pb.out_shape) n_out *= s;
  for (int64_t s : pb.lse_shape) n_lse *= s;
  r.out.resize(n_out);
  r.lse.resize(n_lse);
  reference_flash_fwd(pb.params, pb.dtype, r.out.data(), r.lse.data());
  return r;
}

}  // namespace ejk
