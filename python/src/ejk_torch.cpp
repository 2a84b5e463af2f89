// libejk_torch.so: every ejkernel op as a PyTorch custom op (torch.ops.ejk.<op>) over libejk's
// named-argument C ABI, built on the LibTorch stable ABI only (TORCH_TARGET_VERSION: no ATen or
// c10 headers), so the binary links libtorch_cpu's C shim and nothing of Python. The schemas
// come from the specs when the library loads (ejk_describe_op); one boxed kernel per op index
// reads its op's arguments, sizes the outputs (ejk_output_specs) and calls ejk_run. ejk/torch.py
// loads it with torch.ops.load_library after libejk, and registers fake kernels and autograd.
//   CPU:  the kernels' tasks run on torch's intra-op pool (torch_parallel_for);
//   CUDA: on torch's current stream of the tensors' device.
// Exported: the op registrations (static initializers) and ejk_torch_set_compile_notice.
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include "compile_notice.h"
#include "ejk/ejk.h"

namespace ejk::torch_ops {
namespace {

using torch::stable::Tensor;

// A shim call that failed: torch's message is the pending error; ours names the call.
void shim(AOTITorchError err, const char* what) {
  if (err != AOTI_TORCH_SUCCESS) throw std::runtime_error(std::string("ejk.torch: ") + what + " failed");
}

// libejk's status as the exception torch turns into the matching Python one:
// std::invalid_argument becomes ValueError; the rest RuntimeError, with libejk's message.
void raise_for(int status) {
  if (status == EJK_OK) return;
  if (status == EJK_INVALID_ARGUMENT) throw std::invalid_argument(ejk_last_error());
  throw std::runtime_error(ejk_last_error());
}

int32_t ejk_dtype(int32_t torch_dtype) {
  static const int32_t f32 = aoti_torch_dtype_float32(), bf16 = aoti_torch_dtype_bfloat16(),
                       f16 = aoti_torch_dtype_float16(), f64 = aoti_torch_dtype_float64(),
                       i32 = aoti_torch_dtype_int32(), i64 = aoti_torch_dtype_int64(), u8 = aoti_torch_dtype_uint8();
  if (torch_dtype == f32) return EJK_F32;
  if (torch_dtype == bf16) return EJK_BF16;
  if (torch_dtype == f16) return EJK_F16;
  if (torch_dtype == f64) return EJK_F64;
  if (torch_dtype == i32) return EJK_I32;
  if (torch_dtype == i64) return EJK_I64;
  if (torch_dtype == u8) return EJK_U8;
  return -1;  // libejk names the argument and the dtypes it takes
}

// --- where a call runs ------------------------------------------------------------------------

// The kernels' tasks on torch's intra-op pool: one claimer per pool thread, each taking ranges
// from a shared counter, because tasks differ in cost (causal rows, varlen sequences) and
// torch_parallel_for splits its range evenly. Nested in a parallel region it runs inline.
struct TorchPool {
  using Fn = void (*)(void* arg, int64_t begin, int64_t end);
  Fn fn;
  void* arg;
  int64_t n, grain;
  std::atomic<int64_t> next{0};

  static void parallel_for(void*, int64_t n, Fn fn, void* arg) {
    uint32_t threads = 1;
    shim(torch_get_num_threads(&threads), "torch_get_num_threads");
    if (threads <= 1 || n <= 1) return fn(arg, 0, n);
    TorchPool job{fn, arg, n, std::max<int64_t>(1, n / (int64_t{threads} * 4))};
    shim(torch_parallel_for(0, threads, 1, &TorchPool::claim, &job), "torch_parallel_for");
  }

  static void claim(int64_t, int64_t, void* self) {
    auto& job = *static_cast<TorchPool*>(self);
    for (;;) {
      const int64_t begin = job.next.fetch_add(job.grain, std::memory_order_relaxed);
      if (begin >= job.n) return;
      job.fn(job.arg, begin, std::min(job.n, begin + job.grain));
    }
  }
};

// torch's current CUDA stream. The shim function lives in libtorch_cuda, which a CPU-only torch
// lacks, so it is looked up in the loaded library on the first CUDA call instead of linked.
void* current_cuda_stream(int32_t device_index) {
  using GetStream = AOTITorchError (*)(int32_t, void**);
  static const GetStream get = [] {
    void* lib = dlopen("libtorch_cuda.so", RTLD_LAZY | RTLD_NOLOAD);
    return lib ? reinterpret_cast<GetStream>(dlsym(lib, "aoti_torch_get_current_cuda_stream")) : nullptr;
  }();
  if (!get) throw std::runtime_error("ejk.torch: a CUDA tensor, but this torch has no libtorch_cuda");
  void* stream = nullptr;
  shim(get(device_index, &stream), "aoti_torch_get_current_cuda_stream");
  return stream;
}

// The device of a call (its first tensor's) and the context libejk runs it with.
struct Where {
  ejk_context ctx;
  int32_t torch_device_type, device_kind, device_index;
};

Where where(const Tensor& first) {
  static const int32_t cpu = aoti_torch_device_type_cpu(), cuda = aoti_torch_device_type_cuda();
  Where w{};
  ejk_context_init(&w.ctx);
  shim(aoti_torch_get_device_type(first.get(), &w.torch_device_type), "aoti_torch_get_device_type");
  shim(aoti_torch_get_device_index(first.get(), &w.device_index), "aoti_torch_get_device_index");
  if (w.torch_device_type == cpu) {
    w.device_kind = EJK_DEVICE_CPU;
    w.device_index = 0;
    w.ctx.backend = EJK_BACKEND_CPU;
    w.ctx.cpu_parallel_for = &TorchPool::parallel_for;
  } else if (w.torch_device_type == cuda) {
    w.device_kind = EJK_DEVICE_CUDA;
    w.ctx.backend = EJK_BACKEND_CUDA;
    w.ctx.stream = current_cuda_stream(w.device_index);
  } else {
    throw std::invalid_argument("ejk.torch: tensors must be on the CPU or a CUDA device");
  }
  return w;
}

// --- tensors ----------------------------------------------------------------------------------

// A torch tensor as an ejk_tensor: shape and strides point into the tensor, which outlives the
// call. Each tensor keeps its own device, so libejk names one on another device than the first.
struct Described {
  Tensor tensor;
  ejk_tensor t{};
};

enum class Layout { kRowsContiguous, kContiguous };

// What libejk reads: rows with a unit last stride; index and sink tensors whole. Another layout
// is copied first, as torch's own ops do, rather than refused.
bool fits(const Tensor& x, Layout layout) {
  if (layout == Layout::kContiguous || x.dim() == 0) return x.is_contiguous();
  return x.size(-1) <= 1 || x.stride(-1) == 1;
}

Described describe(const Tensor& given, Layout layout = Layout::kRowsContiguous) {
  static const int32_t cpu = aoti_torch_device_type_cpu();
  Described d{fits(given, layout) ? given : torch::stable::contiguous(given)};
  int32_t dtype = 0, device_type = 0, device_index = 0;
  shim(aoti_torch_get_dtype(d.tensor.get(), &dtype), "aoti_torch_get_dtype");
  shim(aoti_torch_get_device_type(d.tensor.get(), &device_type), "aoti_torch_get_device_type");
  shim(aoti_torch_get_device_index(d.tensor.get(), &device_index), "aoti_torch_get_device_index");
  d.t.data = d.tensor.data_ptr();
  d.t.dtype = ejk_dtype(dtype);
  d.t.device_kind = device_type == cpu ? EJK_DEVICE_CPU : EJK_DEVICE_CUDA;
  d.t.device_index = device_type == cpu ? 0 : device_index;
  d.t.rank = static_cast<int32_t>(d.tensor.dim());
  d.t.shape = d.tensor.sizes().data();
  d.t.strides = d.tensor.strides().data();
  return d;
}

// A new contiguous tensor on the call's device, described for libejk.
Described output(const Where& w, const int64_t* shape, int32_t rank, int32_t torch_dtype) {
  int64_t strides[8] = {};
  int64_t stride = 1;
  for (int32_t i = rank; i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
  }
  AtenTensorHandle handle = nullptr;
  shim(aoti_torch_empty_strided(rank, shape, strides, torch_dtype, w.torch_device_type, w.device_index, &handle),
       "aoti_torch_empty_strided");
  return describe(Tensor(handle));
}

int32_t torch_dtype(int32_t ejk) {
  switch (ejk) {
    case EJK_F32: return aoti_torch_dtype_float32();
    case EJK_BF16: return aoti_torch_dtype_bfloat16();
    case EJK_F16: return aoti_torch_dtype_float16();
    case EJK_F64: return aoti_torch_dtype_float64();
    case EJK_I32: return aoti_torch_dtype_int32();
    case EJK_I64: return aoti_torch_dtype_int64();
    case EJK_U8: return aoti_torch_dtype_uint8();
    default: throw std::runtime_error("ejk.torch: libejk gave an output dtype code " + std::to_string(ejk));
  }
}

// --- every op from its spec ----------------------------------------------------------------

constexpr int kMaxOps = 64;   // ops one libejk_torch can serve (a boxed kernel per index)
constexpr int kMaxArgs = 64;  // tensors, scalars and tuning values of one call
constexpr int kMaxOutputs = 16;

// An op as torch sees it: its schema, built from the spec at load, and its arguments in the
// schema's order (inputs, then scalars; outputs are returned).
struct Op {
  const char* name = nullptr;
  std::string schema;
  std::vector<const ejk_param_info*> args;
  // The op's tuning axes: the schema's last argument, `int[]? tune`, holds one value for each
  // (0: not given), so cfg= reaches libejk through any torch.compile graph as a list of ints.
  std::vector<const ejk_param_info*> tuning;
};

// The torch schema type of a scalar: every scalar is optional (None: the spec's default).
const char* scalar_type(const ejk_param_info& p) {
  const std::string_view t = p.type;
  if (t == "bool") return "bool?";
  if (t == "i64") return "SymInt?";
  if (t == "f32" || t == "f64") return "float?";
  if (t == "i64[2]") return "int[]?";
  throw std::runtime_error(std::string("ejk.torch: ") + p.name + ": scalar type " + p.type + " has no torch type");
}

Op make_op(const char* name) {
  Op op;
  op.name = name;
  ejk_op_info info{};
  if (ejk_describe_op(name, &info) != EJK_OK) throw std::runtime_error(ejk_last_error());
  std::string params, returns;
  int outputs = 0;
  for (const int32_t role : {EJK_PARAM_INPUT, EJK_PARAM_SCALAR}) {  // the schema takes tensors first
    for (int32_t i = 0; i < info.num_params; ++i) {
      const ejk_param_info& p = info.params[i];
      if (p.role != role) continue;
      if (!params.empty()) params += ", ";
      if (role == EJK_PARAM_INPUT)
        params += std::string(p.optional ? "Tensor? " : "Tensor ") + p.name;
      else
        params += std::string(scalar_type(p)) + " " + p.name + "=None";
      op.args.push_back(&p);
    }
  }
  for (int32_t i = 0; i < info.num_params; ++i)
    if (info.params[i].role == EJK_PARAM_TUNING) op.tuning.push_back(&info.params[i]);
  if (!op.tuning.empty()) params += ", int[]? tune=None";
  for (int32_t i = 0; i < info.num_params; ++i) {
    if (info.params[i].role != EJK_PARAM_OUTPUT) continue;
    returns += std::string(outputs++ ? ", " : "") + "Tensor " + info.params[i].name;
  }
  op.schema = std::string(name) + "(" + params + ") -> " + (outputs == 1 ? returns : "(" + returns + ")");
  return op;
}

const std::vector<Op>& ops() {
  static const std::vector<Op> all = [] {
    std::vector<Op> v;
    const int32_t n = ejk_op_count();
    if (n > kMaxOps) throw std::runtime_error("ejk.torch: libejk has more ops than this libejk_torch serves");
    for (int32_t i = 0; i < n; ++i) v.push_back(make_op(ejk_op_name(i)));
    return v;
  }();
  return all;
}

// The schema's `tune` list as EJK_ARG_TUNE entries after args[0, n); returns the new count.
int tuning_args(const Op& op, StableIValue value, ejk_arg* args, int n) {
  const auto v = torch::stable::detail::to<std::optional<std::vector<int64_t>>>(value);
  if (!v) return n;
  if (v->size() != op.tuning.size())
    throw std::invalid_argument(std::string(op.name) + ": tune: expected " + std::to_string(op.tuning.size()) +
                                " values (one per tuning axis), got " + std::to_string(v->size()));
  for (size_t i = 0; i < v->size(); ++i)
    if ((*v)[i] != 0) args[n++] = ejk_arg{op.tuning[i]->name, EJK_ARG_TUNE, nullptr, {(*v)[i], 0}, 0.0};
  return n;
}

// One call of ops()[index]: reads the stack by the op's arguments, asks libejk for the outputs'
// shapes, allocates them on the inputs' device, runs, and returns the outputs on the stack.
void call(int index, StableIValue* stack, uint64_t num_inputs, uint64_t num_outputs) {
  using torch::stable::detail::from;
  using torch::stable::detail::to;
  const Op& op = ops()[size_t(index)];
  if (num_inputs != op.args.size() + (op.tuning.empty() ? 0 : 1))
    throw std::runtime_error(std::string("ejk.torch: ") + op.name + ": called with an unexpected argument count");
  std::optional<Described> tensors[kMaxArgs];
  Described outputs[kMaxOutputs];
  ejk_arg args[kMaxArgs + kMaxOutputs];
  int n = 0;
  const Tensor* first = nullptr;
  std::optional<Tensor> given[kMaxArgs];
  for (size_t j = 0; j < op.args.size(); ++j) {
    const ejk_param_info& p = *op.args[j];
    if (p.role == EJK_PARAM_INPUT) {
      given[j] = p.optional ? to<std::optional<Tensor>>(stack[j]) : std::optional<Tensor>(to<Tensor>(stack[j]));
      if (!given[j]) continue;
      if (!first) first = &*given[j];
      tensors[j] = describe(*given[j], p.contiguous ? Layout::kContiguous : Layout::kRowsContiguous);
      args[n++] = ejk_arg{p.name, EJK_ARG_TENSOR, &tensors[j]->t, {0, 0}, 0.0};
      continue;
    }
    const std::string_view type = p.type;
    ejk_arg a{p.name, EJK_ARG_BOOL, nullptr, {0, 0}, 0.0};
    if (type == "bool") {
      const auto v = to<std::optional<bool>>(stack[j]);
      if (!v) continue;
      a.ints[0] = *v;
    } else if (type == "i64") {
      const auto v = to<std::optional<int64_t>>(stack[j]);
      if (!v) continue;
      a.kind = EJK_ARG_INT;
      a.ints[0] = *v;
    } else if (type == "i64[2]") {
      const auto v = to<std::optional<std::vector<int64_t>>>(stack[j]);
      if (!v) continue;
      if (v->size() != 2)
        throw std::invalid_argument(std::string(op.name) + ": " + p.name + ": expected (left, right), got " +
                                    std::to_string(v->size()) + " values");
      a.kind = EJK_ARG_INT_PAIR;
      a.ints[0] = (*v)[0];
      a.ints[1] = (*v)[1];
    } else {
      const auto v = to<std::optional<double>>(stack[j]);
      if (!v) continue;
      a.kind = EJK_ARG_FLOAT;
      a.real = *v;
    }
    args[n++] = a;
  }
  if (!op.tuning.empty()) n = tuning_args(op, stack[op.args.size()], args, n);
  if (!first) throw std::invalid_argument(std::string(op.name) + ": expected at least one tensor");
  const Where w = where(*first);
  ejk_output_spec specs[kMaxOutputs];
  int32_t count = 0;
  raise_for(ejk_output_specs(op.name, args, n, &w.ctx, specs, kMaxOutputs, &count));
  if (uint64_t(count) != num_outputs)
    throw std::runtime_error(std::string("ejk.torch: ") + op.name + ": libejk and the schema disagree on outputs");
  for (int32_t k = 0; k < count; ++k) {
    outputs[k] = output(w, specs[k].shape, specs[k].rank, torch_dtype(specs[k].dtype));
    args[n++] = ejk_arg{specs[k].name, EJK_ARG_TENSOR, &outputs[k].t, {0, 0}, 0.0};
  }
  raise_for(ejk_run(op.name, args, n, &w.ctx));
  for (int32_t k = 0; k < count; ++k) stack[k] = from(outputs[k].tensor);
}

// The message of this thread's last call that failed on a bad argument, "" otherwise: torch
// raises every exception of a stable-ABI kernel as a RuntimeError, and ejk/torch.py raises
// ValueError instead when this says the argument was at fault.
thread_local std::string t_invalid_argument;

template <int I>
void boxed(StableIValue* stack, uint64_t num_inputs, uint64_t num_outputs) {
  t_invalid_argument.clear();
  try {
    call(I, stack, num_inputs, num_outputs);
  } catch (const std::invalid_argument& e) {
    t_invalid_argument = e.what();
    throw;
  }
}

using Boxed = void (*)(StableIValue*, uint64_t, uint64_t);
template <int... I>
constexpr std::array<Boxed, sizeof...(I)> boxed_table(std::integer_sequence<int, I...>) {
  return {&boxed<I>...};
}
constexpr auto kBoxed = boxed_table(std::make_integer_sequence<int, kMaxOps>());

}  // namespace
}  // namespace ejk::torch_ops

// The schemas, from the specs: torch checks every call's types against them, and ejk/torch.py's
// fake kernels give the same outputs without data.
STABLE_TORCH_LIBRARY(ejk, m) {
  for (const auto& op : ejk::torch_ops::ops()) m.def(op.schema.c_str());
}

// One kernel per op serves both devices: each call reads its device from its tensors.
STABLE_TORCH_LIBRARY_IMPL(ejk, CPU, m) {
  const auto& ops = ejk::torch_ops::ops();
  for (size_t i = 0; i < ops.size(); ++i) m.impl(ops[i].name, ejk::torch_ops::kBoxed[i]);
}

STABLE_TORCH_LIBRARY_IMPL(ejk, CUDA, m) {
  const auto& ops = ejk::torch_ops::ops();
  for (size_t i = 0; i < ops.size(); ++i) m.impl(ops[i].name, ejk::torch_ops::kBoxed[i]);
}

// The message of this thread's last op call that failed on a bad argument, "" if it did not.
extern "C" __attribute__((visibility("default"))) const char* ejk_torch_last_invalid_argument(void) {
  return ejk::torch_ops::t_invalid_argument.c_str();
}

// Installs the compile observer; a compile of at least `seconds` is reported on stderr.
extern "C" __attribute__((visibility("default"))) void ejk_torch_set_compile_notice(double seconds) {
  ejk::python::CompileNotice::install(seconds);
}
