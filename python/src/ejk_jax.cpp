// libejk_jax.so: ejkernel's ops as XLA FFI handlers, one per op and platform, over libejk's C ABI.
// Python (ejk/jax.py) registers them with jax.ffi and checks every call when it traces it
// (ejk_variant_key), so a handler only describes XLA's buffers and calls the op:
//   CPU:  on XLA's intra-op thread pool (xla_pool.h);
//   CUDA: on XLA's stream, on the device XLA runs the computation on.
// Exported: the handlers (ejk_jax_<op>_<platform>) and ejk_jax_set_compile_notice.
#include <utility>

#include "compile_notice.h"
#include "ejk/ejk.h"
#include "xla/ffi/api/ffi.h"
#include "xla_pool.h"

namespace ffi = xla::ffi;
using cudaStream_t = struct CUstream_st*;  // only passed on: no CUDA headers needed

namespace ejk::jax {
namespace {

// Where a call runs: the context for libejk and the device its buffers are on.
struct Where {
  ejk_context ctx;
  int32_t device_kind, device_index;
};

// An XLA buffer as an ejk_tensor. The shape is copied here and t points at it, so a Tensor
// stays where it was made (no copies). XLA's buffers are dense row-major: strides stay NULL.
struct Tensor {
  ejk_tensor t{};
  int64_t shape[8] = {};

  Tensor() = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  Tensor(const ffi::AnyBuffer& b, const Where& w) { set(b, w); }
  void set(const ffi::AnyBuffer& b, const Where& w);
};

int32_t ejk_dtype(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::F32: return EJK_F32;
    case ffi::DataType::BF16: return EJK_BF16;
    case ffi::DataType::F16: return EJK_F16;
    case ffi::DataType::F64: return EJK_F64;
    case ffi::DataType::S32: return EJK_I32;
    case ffi::DataType::S64: return EJK_I64;
    case ffi::DataType::U8: return EJK_U8;
    default: return -1;  // libejk names the argument and the dtypes it takes
  }
}

void Tensor::set(const ffi::AnyBuffer& b, const Where& w) {
  const auto dims = b.dimensions();
  t.rank = static_cast<int32_t>(dims.size());
  for (size_t i = 0; i < dims.size() && i < 8; ++i) shape[i] = dims[i];
  t.data = b.untyped_data();
  t.dtype = ejk_dtype(b.element_type());
  t.device_kind = w.device_kind;
  t.device_index = w.device_index;
  t.shape = shape;
}

ffi::Error status_to_error(int status) {
  switch (status) {
    case EJK_OK: return ffi::Error::Success();
    case EJK_INVALID_ARGUMENT: return ffi::Error(ffi::ErrorCode::kInvalidArgument, ejk_last_error());
    case EJK_BACKEND_UNAVAILABLE: return ffi::Error(ffi::ErrorCode::kUnavailable, ejk_last_error());
    default: return ffi::Error(ffi::ErrorCode::kInternal, ejk_last_error());
  }
}

// --- ops ------------------------------------------------------------------------------------

// Bits of `present` in flash_attention's optional operands, in operand order.
enum FlashOptional : int64_t { kBias = 1, kQSeg = 2, kKvSeg = 4, kCuQ = 8, kCuK = 16, kAux = 32 };

ffi::Error flash_attention(const Where& w, ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v,
                           ffi::RemainingArgs optional, ffi::Result<ffi::AnyBuffer> out,
                           ffi::Result<ffi::AnyBuffer> lse, int64_t present, int64_t has_scale, float scale,
                           int64_t causal, int64_t has_window, int64_t left, int64_t right, float softcap,
                           int64_t normalize, int64_t max_seqlen_q, int64_t max_seqlen_k) {
  Tensor given[6];
  const ejk_tensor* slot[6] = {};
  for (int bit = 0, next = 0; bit < 6; ++bit) {
    if (!(present & (int64_t{1} << bit))) continue;
    auto buffer = optional.get<ffi::AnyBuffer>(next++);
    if (buffer.has_error()) return buffer.error();
    given[bit].set(*buffer, w);
    slot[bit] = &given[bit].t;
  }
  ejk_flash_options opt;
  ejk_flash_options_init(&opt);
  opt.has_softmax_scale = has_scale != 0;
  opt.softmax_scale = scale;
  opt.causal = causal != 0;
  opt.has_window = has_window != 0;
  opt.window_left = left;
  opt.window_right = right;
  opt.logits_soft_cap = softcap;
  opt.normalize_output = normalize != 0;
  opt.max_seqlen_q = max_seqlen_q;
  opt.max_seqlen_k = max_seqlen_k;
  const Tensor tq(q, w), tk(k, w), tv(v, w), to(*out, w), tl(*lse, w);
  return status_to_error(ejk_flash_attention(&w.ctx, &tq.t, &tk.t, &tv.t, slot[0], slot[1], slot[2], slot[3],
                                             slot[4], slot[5], &opt, &to.t, &tl.t));
}

// cu_seqlens is the one remaining operand when the call is packed varlen.
ffi::Error mean_pooling(const Where& w, ffi::AnyBuffer x, ffi::RemainingArgs cu_seqlens,
                        ffi::Result<ffi::AnyBuffer> out) {
  Tensor cu;
  if (cu_seqlens.size() > 0) {
    auto buffer = cu_seqlens.get<ffi::AnyBuffer>(0);
    if (buffer.has_error()) return buffer.error();
    cu.set(*buffer, w);
  }
  const Tensor tx(x, w), to(*out, w);
  return status_to_error(ejk_mean_pooling(&w.ctx, &tx.t, cu_seqlens.size() > 0 ? &cu.t : nullptr, &to.t));
}

ffi::Error mean_pooling_backward(const Where& w, ffi::AnyBuffer g, ffi::RemainingArgs cu_seqlens,
                                 ffi::Result<ffi::AnyBuffer> dx) {
  Tensor cu;
  if (cu_seqlens.size() > 0) {
    auto buffer = cu_seqlens.get<ffi::AnyBuffer>(0);
    if (buffer.has_error()) return buffer.error();
    cu.set(*buffer, w);
  }
  const Tensor tg(g, w), td(*dx, w);
  return status_to_error(ejk_mean_pooling_backward(&w.ctx, &tg.t, cu_seqlens.size() > 0 ? &cu.t : nullptr, &td.t));
}

ffi::Error merge_attention_states(const Where& w, ffi::AnyBuffer out_a, ffi::AnyBuffer lse_a, ffi::AnyBuffer out_b,
                                  ffi::AnyBuffer lse_b, ffi::Result<ffi::AnyBuffer> out,
                                  ffi::Result<ffi::AnyBuffer> lse) {
  const Tensor oa(out_a, w), la(lse_a, w), ob(out_b, w), lb(lse_b, w), to(*out, w), tl(*lse, w);
  return status_to_error(ejk_merge_attention_states(&w.ctx, &oa.t, &la.t, &ob.t, &lb.t, &to.t, &tl.t));
}

// --- platforms: what each adds to a binding, and the Where it gives the op ------------------

template <class Op>
auto on_cpu(Op op) {
  return [op](ffi::ThreadPool pool, auto... rest) -> ffi::Error {
    XlaPool xla_pool(pool);
    Where w{{}, EJK_DEVICE_CPU, 0};
    ejk_context_init(&w.ctx);
    w.ctx.backend = EJK_BACKEND_CPU;
    w.ctx.cpu_parallel_for = &XlaPool::parallel_for;
    w.ctx.cpu_pool = &xla_pool;
    return op(w, rest...);
  };
}

template <class Op>
auto on_cuda(Op op) {
  return [op](cudaStream_t stream, int32_t device, auto... rest) -> ffi::Error {
    Where w{{}, EJK_DEVICE_CUDA, device};
    ejk_context_init(&w.ctx);
    w.ctx.backend = EJK_BACKEND_CUDA;
    w.ctx.stream = stream;
    return op(w, rest...);
  };
}

auto cpu_binding() { return ffi::Ffi::Bind().Ctx<ffi::ThreadPool>(); }
auto cuda_binding() { return ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>().Ctx<ffi::DeviceOrdinal>(); }

template <class B>
auto flash_binding(B b) {
  return std::move(b).template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .RemainingArgs()
      .template Ret<ffi::AnyBuffer>()
      .template Ret<ffi::AnyBuffer>()
      .template Attr<int64_t>("present")
      .template Attr<int64_t>("has_scale")
      .template Attr<float>("softmax_scale")
      .template Attr<int64_t>("causal")
      .template Attr<int64_t>("has_window")
      .template Attr<int64_t>("window_left")
      .template Attr<int64_t>("window_right")
      .template Attr<float>("logits_soft_cap")
      .template Attr<int64_t>("normalize_output")
      .template Attr<int64_t>("max_seqlen_q")
      .template Attr<int64_t>("max_seqlen_k");
}

template <class B>
auto pooling_binding(B b) {  // mean_pooling and its backward: one operand, cu_seqlens, one result
  return std::move(b).template Arg<ffi::AnyBuffer>().RemainingArgs().template Ret<ffi::AnyBuffer>();
}

template <class B>
auto merge_binding(B b) {
  return std::move(b).template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Ret<ffi::AnyBuffer>()
      .template Ret<ffi::AnyBuffer>();
}

}  // namespace
}  // namespace ejk::jax

using ejk::jax::cpu_binding;
using ejk::jax::cuda_binding;
using ejk::jax::on_cpu;
using ejk::jax::on_cuda;

#define EJK_JAX_EXPORT extern "C" __attribute__((visibility("default")))

// Installs the compile observer; a compile of at least `seconds` is reported.
EJK_JAX_EXPORT void ejk_jax_set_compile_notice(double seconds) { ejk::python::CompileNotice::install(seconds); }

// The handlers are the library's API (python/ejk.map keeps them and nothing else exported).
#pragma GCC visibility push(default)
XLA_FFI_DEFINE_HANDLER_SYMBOL(ejk_jax_flash_attention_cpu, on_cpu(ejk::jax::flash_attention),
                              ejk::jax::flash_binding(cpu_binding()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(ejk_jax_flash_attention_cuda, on_cuda(ejk::jax::flash_attention),
                              ejk::jax::flash_binding(cuda_binding()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(ejk_jax_mean_pooling_cpu, on_cpu(ejk::jax::mean_pooling),
                              ejk::jax::pooling_binding(cpu_binding()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(ejk_jax_mean_pooling_cuda, on_cuda(ejk::jax::mean_pooling),
                              ejk::jax::pooling_binding(cuda_binding()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(ejk_jax_mean_pooling_backward_cpu, on_cpu(ejk::jax::mean_pooling_backward),
                              ejk::jax::pooling_binding(cpu_binding()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(ejk_jax_mean_pooling_backward_cuda, on_cuda(ejk::jax::mean_pooling_backward),
                              ejk::jax::pooling_binding(cuda_binding()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(ejk_jax_merge_attention_states_cpu, on_cpu(ejk::jax::merge_attention_states),
                              ejk::jax::merge_binding(cpu_binding()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(ejk_jax_merge_attention_states_cuda, on_cuda(ejk::jax::merge_attention_states),
                              ejk::jax::merge_binding(cuda_binding()));
#pragma GCC visibility pop
