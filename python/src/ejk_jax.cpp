// libejk_jax.so: every ejkernel op as one XLA FFI handler per platform, over libejk's
// named-argument C ABI (ejk_run). Python (ejk/_jax_call.py) checks each call when it traces it
// (ejk_output_specs, ejk_variant_key) and describes it in typed attributes:
//   op            the op's name;
//   tensor_names  the operands' names, then the results', comma-separated;
//   scalar_names  the scalars' names, comma-separated ("" for none);
//   scalar_ints   three per scalar: its ejk_arg_kind, ints[0], ints[1] (padded to one entry);
//   scalar_reals  one per scalar: its value as a float (padded to one entry).
// XLA decodes the attributes; a call only splits the names into a buffer on the stack.
//   CPU:  on XLA's intra-op thread pool (xla_pool.h);
//   CUDA: on XLA's stream, on the device XLA runs the computation on.
// Exported: the handlers (ejk_jax_call_<platform>) and ejk_jax_set_compile_notice.
#include <cstring>
#include <string_view>
#include <utility>

#include "compile_notice.h"
#include "ejk/ejk.h"
#include "xla/ffi/api/ffi.h"
#include "xla_pool.h"

namespace ffi = xla::ffi;
using cudaStream_t = struct CUstream_st*;  // only passed on: no CUDA headers needed

namespace ejk::jax {
namespace {

constexpr int kMaxArgs = 64;        // tensors and scalars of one call
constexpr size_t kMaxNames = 2048;  // bytes of all names of one call, NUL-terminated

// Where a call runs: the context for libejk and the device its buffers are on.
struct Where {
  ejk_context ctx;
  int32_t device_kind, device_index;
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

ffi::Error status_to_error(int status) {
  switch (status) {
    case EJK_OK: return ffi::Error::Success();
    case EJK_INVALID_ARGUMENT: return ffi::Error(ffi::ErrorCode::kInvalidArgument, ejk_last_error());
    case EJK_BACKEND_UNAVAILABLE: return ffi::Error(ffi::ErrorCode::kUnavailable, ejk_last_error());
    default: return ffi::Error(ffi::ErrorCode::kInternal, ejk_last_error());
  }
}

ffi::Error bad_call(const char* what) { return ffi::Error(ffi::ErrorCode::kInvalidArgument, what); }

// Comma-separated names as NUL-terminated strings in one buffer: names[i] points into it.
class Names {
 public:
  // Appends the names of `list`; false when they do not fit.
  bool split(std::string_view list, const char** names, int max, int* count) {
    *count = 0;
    if (list.empty()) return true;
    size_t start = 0;
    for (;;) {
      const size_t comma = list.find(',', start);
      const std::string_view name = list.substr(start, comma == std::string_view::npos ? comma : comma - start);
      if (*count == max || used_ + name.size() + 1 > kMaxNames) return false;
      std::memcpy(buffer_ + used_, name.data(), name.size());
      buffer_[used_ + name.size()] = '\0';
      names[(*count)++] = buffer_ + used_;
      used_ += name.size() + 1;
      if (comma == std::string_view::npos) return true;
      start = comma + 1;
    }
  }

 private:
  char buffer_[kMaxNames];
  size_t used_ = 0;
};

// An XLA buffer as an ejk_tensor: the shape is XLA's own array, valid for the call. XLA's
// buffers are dense row-major: strides stay NULL.
ejk_tensor describe(const ffi::AnyBuffer& b, const Where& w) {
  const auto dims = b.dimensions();
  return ejk_tensor{b.untyped_data(), ejk_dtype(b.element_type()), w.device_kind, w.device_index,
                    static_cast<int32_t>(dims.size()), dims.begin(), nullptr};
}

ffi::Error call(const Where& w, ffi::RemainingArgs operands, ffi::RemainingRets results, std::string_view op,
                std::string_view tensor_names, std::string_view scalar_names, ffi::Span<const int64_t> scalar_ints,
                ffi::Span<const double> scalar_reals) {
  Names names;
  const char* op_name[1];
  const char* tensor[kMaxArgs];
  const char* scalar[kMaxArgs];
  int one = 0, tensors = 0, scalars = 0;
  if (!names.split(op, op_name, 1, &one) || one != 1) return bad_call("ejk_jax: op: expected one op name");
  if (!names.split(tensor_names, tensor, kMaxArgs, &tensors) ||
      tensors != static_cast<int>(operands.size() + results.size()))
    return bad_call("ejk_jax: tensor_names: expected one name per operand and result");
  if (!names.split(scalar_names, scalar, kMaxArgs - tensors, &scalars) ||
      scalar_ints.size() < size_t(3 * scalars) || scalar_reals.size() < size_t(scalars))
    return bad_call("ejk_jax: scalar_names: expected three scalar_ints and one scalar_real per scalar");

  ejk_tensor described[kMaxArgs];
  ejk_arg args[kMaxArgs];
  int n = 0;
  for (size_t i = 0; i < operands.size(); ++i, ++n) {
    auto buffer = operands.get<ffi::AnyBuffer>(i);
    if (buffer.has_error()) return buffer.error();
    described[n] = describe(*buffer, w);
    args[n] = ejk_arg{tensor[n], EJK_ARG_TENSOR, &described[n], {0, 0}, 0.0};
  }
  for (size_t i = 0; i < results.size(); ++i, ++n) {
    auto buffer = results.get<ffi::AnyBuffer>(i);
    if (buffer.has_error()) return buffer.error();
    described[n] = describe(**buffer, w);
    args[n] = ejk_arg{tensor[n], EJK_ARG_TENSOR, &described[n], {0, 0}, 0.0};
  }
  for (int s = 0; s < scalars; ++s, ++n) {
    const int64_t* x = scalar_ints.begin() + 3 * s;
    args[n] = ejk_arg{scalar[s], static_cast<int32_t>(x[0]), nullptr, {x[1], x[2]}, scalar_reals.begin()[s]};
  }
  return status_to_error(ejk_run(op_name[0], args, n, &w.ctx));
}

// --- platforms: what each adds to the binding, and the Where it gives the call ---------------

ffi::Error call_cpu(ffi::ThreadPool pool, ffi::RemainingArgs operands, ffi::RemainingRets results,
                    std::string_view op, std::string_view tensor_names, std::string_view scalar_names,
                    ffi::Span<const int64_t> scalar_ints, ffi::Span<const double> scalar_reals) {
  XlaPool xla_pool(pool);
  Where w{{}, EJK_DEVICE_CPU, 0};
  ejk_context_init(&w.ctx);
  w.ctx.backend = EJK_BACKEND_CPU;
  w.ctx.cpu_parallel_for = &XlaPool::parallel_for;
  w.ctx.cpu_pool = &xla_pool;
  return call(w, operands, results, op, tensor_names, scalar_names, scalar_ints, scalar_reals);
}

ffi::Error call_cuda(cudaStream_t stream, int32_t device, ffi::RemainingArgs operands, ffi::RemainingRets results,
                     std::string_view op, std::string_view tensor_names, std::string_view scalar_names,
                     ffi::Span<const int64_t> scalar_ints, ffi::Span<const double> scalar_reals) {
  Where w{{}, EJK_DEVICE_CUDA, device};
  ejk_context_init(&w.ctx);
  w.ctx.backend = EJK_BACKEND_CUDA;
  w.ctx.stream = stream;
  return call(w, operands, results, op, tensor_names, scalar_names, scalar_ints, scalar_reals);
}

template <class B>
auto call_binding(B b) {
  return std::move(b)
      .RemainingArgs()
      .RemainingRets()
      .template Attr<std::string_view>("op")
      .template Attr<std::string_view>("tensor_names")
      .template Attr<std::string_view>("scalar_names")
      .template Attr<ffi::Span<const int64_t>>("scalar_ints")
      .template Attr<ffi::Span<const double>>("scalar_reals");
}

}  // namespace
}  // namespace ejk::jax

#define EJK_JAX_EXPORT extern "C" __attribute__((visibility("default")))

// Installs the compile observer; a compile of at least `seconds` is reported.
EJK_JAX_EXPORT void ejk_jax_set_compile_notice(double seconds) { ejk::python::CompileNotice::install(seconds); }

// The handlers are the library's API (python/ejk_jax.map keeps them and nothing else exported).
#pragma GCC visibility push(default)
XLA_FFI_DEFINE_HANDLER_SYMBOL(ejk_jax_call_cpu, ejk::jax::call_cpu,
                              ejk::jax::call_binding(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(ejk_jax_call_cuda, ejk::jax::call_cuda,
                              ejk::jax::call_binding(ffi::Ffi::Bind()
                                                         .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                                         .Ctx<ffi::DeviceOrdinal>()));
#pragma GCC visibility pop
