// libejk_torch.so: ejkernel's ops as PyTorch custom ops (torch.ops.ejk.*) over libejk's C ABI,
// built on the LibTorch stable ABI only (TORCH_TARGET_VERSION: no ATen or c10 headers), so the
// binary links libtorch_cpu's C shim and nothing of Python. ejk/torch.py loads it with
// torch.ops.load_library after libejk, and registers the fake (meta) kernels and autograd.
//   CPU:  the kernels' tasks run on torch's intra-op pool (torch_parallel_for);
//   CUDA: on torch's current stream of the tensors' device.
// Exported: the op registrations (static initializers) and ejk_torch_set_compile_notice.
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include "compile_notice.h"
#include "ejk/ejk.h"

namespace ejk::torch_ops {
namespace {

using torch::stable::Tensor;
using Shape = std::vector<int64_t>;

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

std::optional<Described> describe(const std::optional<Tensor>& given, Layout layout = Layout::kRowsContiguous) {
  if (!given) return std::nullopt;
  return describe(*given, layout);
}

const ejk_tensor* ptr(const std::optional<Described>& d) { return d ? &d->t : nullptr; }

// A new contiguous tensor on the call's device, described for libejk.
Described output(const Where& w, const Shape& shape, int32_t torch_dtype) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
  }
  AtenTensorHandle handle = nullptr;
  shim(aoti_torch_empty_strided(static_cast<int64_t>(shape.size()), shape.data(), strides.data(), torch_dtype,
                                w.torch_device_type, w.device_index, &handle),
       "aoti_torch_empty_strided");
  return describe(Tensor(handle));
}

int32_t dtype_of(const Tensor& x) {
  int32_t dtype = 0;
  shim(aoti_torch_get_dtype(x.get(), &dtype), "aoti_torch_get_dtype");
  return dtype;
}

// A rank the output shapes depend on, checked before anything is allocated.
void expect_rank(const char* op, const char* name, const Tensor& x, int64_t lo, int64_t hi, const char* layouts) {
  if (x.dim() < lo || x.dim() > hi)
    throw std::invalid_argument(std::string(op) + ": " + name + ": expected " + layouts + ", got rank " +
                                std::to_string(x.dim()));
}

// --- ops --------------------------------------------------------------------------------------

std::tuple<Tensor, Tensor> flash_attention(Tensor q, Tensor k, Tensor v, std::optional<Tensor> bias,
                                           std::optional<Tensor> q_segment_ids,
                                           std::optional<Tensor> kv_segment_ids,
                                           std::optional<Tensor> cum_seqlens_q,
                                           std::optional<Tensor> cum_seqlens_k, std::optional<Tensor> softmax_aux,
                                           std::optional<double> softmax_scale, bool causal,
                                           std::optional<std::vector<int64_t>> sliding_window,
                                           std::optional<double> logits_soft_cap, bool normalize_output,
                                           std::optional<int64_t> max_seqlen_q, std::optional<int64_t> max_seqlen_k) {
  expect_rank("flash_attention", "q", q, 3, 4, "[B, Sq, Hq, D] (packed varlen: [Tq, Hq, D] or [1, Tq, Hq, D])");
  ejk_flash_options opt;
  ejk_flash_options_init(&opt);
  opt.has_softmax_scale = softmax_scale.has_value();
  opt.softmax_scale = static_cast<float>(softmax_scale.value_or(0.0));
  opt.causal = causal;
  if (sliding_window) {
    if (sliding_window->size() != 2)
      throw std::invalid_argument("flash_attention: sliding_window: expected (left, right), got " +
                                  std::to_string(sliding_window->size()) + " values");
    opt.has_window = 1;
    opt.window_left = (*sliding_window)[0];
    opt.window_right = (*sliding_window)[1];
  }
  opt.logits_soft_cap = static_cast<float>(logits_soft_cap.value_or(0.0));
  opt.normalize_output = normalize_output;
  opt.max_seqlen_q = max_seqlen_q.value_or(-1);
  opt.max_seqlen_k = max_seqlen_k.value_or(-1);

  const Where w = where(q);
  const Described tq = describe(q), tk = describe(k), tv = describe(v);
  const auto tb = describe(bias), tqs = describe(q_segment_ids), tks = describe(kv_segment_ids);
  const auto tcq = describe(cum_seqlens_q, Layout::kContiguous), tck = describe(cum_seqlens_k, Layout::kContiguous);
  const auto taux = describe(softmax_aux, Layout::kContiguous);
  const int64_t r = q.dim();
  const Shape lse_shape = cum_seqlens_q ? Shape{1, q.size(r - 2), q.size(r - 3)}
                                        : Shape{q.size(0), q.size(r - 2), q.size(1)};
  const Described out = output(w, Shape(tq.t.shape, tq.t.shape + r), dtype_of(q));
  const Described lse = output(w, lse_shape, aoti_torch_dtype_float32());
  raise_for(ejk_flash_attention(&w.ctx, &tq.t, &tk.t, &tv.t, ptr(tb), ptr(tqs), ptr(tks), ptr(tcq), ptr(tck),
                                ptr(taux), &opt, &out.t, &lse.t));
  return {out.tensor, lse.tensor};
}

Tensor mean_pooling(Tensor x, std::optional<Tensor> cu_seqlens) {
  if (cu_seqlens)
    expect_rank("mean_pooling", "x", x, 2, 2, "[total_tokens, D] with cu_seqlens");
  else
    expect_rank("mean_pooling", "x", x, 3, 3, "[B, T, D]");
  const Where w = where(x);
  const Described tx = describe(x);
  const auto tcu = describe(cu_seqlens, Layout::kContiguous);
  const int64_t rows = cu_seqlens ? std::max<int64_t>(cu_seqlens->numel() - 1, 0) : x.size(0);
  const Described out = output(w, {rows, x.size(-1)}, dtype_of(x));
  raise_for(ejk_mean_pooling(&w.ctx, &tx.t, ptr(tcu), &out.t));
  return out.tensor;
}

// tokens: T of the dense dx [B, T, D], or total_tokens of the packed dx [total_tokens, D].
Tensor mean_pooling_backward(Tensor g, std::optional<Tensor> cu_seqlens, int64_t tokens) {
  expect_rank("mean_pooling_backward", "g", g, 2, 2, "[B, D] (packed varlen: [N, D])");
  if (tokens < 0)
    throw std::invalid_argument("mean_pooling_backward: tokens: must be >= 0, got " + std::to_string(tokens));
  const Where w = where(g);
  const Described tg = describe(g);
  const auto tcu = describe(cu_seqlens, Layout::kContiguous);
  const Shape shape = cu_seqlens ? Shape{tokens, g.size(1)} : Shape{g.size(0), tokens, g.size(1)};
  const Described dx = output(w, shape, dtype_of(g));
  raise_for(ejk_mean_pooling_backward(&w.ctx, &tg.t, ptr(tcu), &dx.t));
  return dx.tensor;
}

std::tuple<Tensor, Tensor> merge_attention_states(Tensor out_a, Tensor lse_a, Tensor out_b, Tensor lse_b) {
  const Where w = where(out_a);
  const Described ta = describe(out_a), la = describe(lse_a), tb = describe(out_b), lb = describe(lse_b);
  const Described out = output(w, Shape(ta.t.shape, ta.t.shape + ta.t.rank), dtype_of(out_a));
  const Described lse = output(w, Shape(la.t.shape, la.t.shape + la.t.rank), aoti_torch_dtype_float32());
  raise_for(ejk_merge_attention_states(&w.ctx, &ta.t, &la.t, &tb.t, &lb.t, &out.t, &lse.t));
  return {out.tensor, lse.tensor};
}

}  // namespace
}  // namespace ejk::torch_ops

// The schemas: torch checks every call's types against them, and ejk/torch.py's fake kernels
// give the same outputs without data.
STABLE_TORCH_LIBRARY(ejk, m) {
  m.def("flash_attention(Tensor q, Tensor k, Tensor v, Tensor? bias, Tensor? q_segment_ids, "
        "Tensor? kv_segment_ids, Tensor? cum_seqlens_q, Tensor? cum_seqlens_k, Tensor? softmax_aux, "
        "float? softmax_scale, bool causal, int[]? sliding_window, float? logits_soft_cap, "
        "bool normalize_output, int? max_seqlen_q, int? max_seqlen_k) -> (Tensor out, Tensor lse)");
  m.def("mean_pooling(Tensor x, Tensor? cu_seqlens) -> Tensor");
  m.def("mean_pooling_backward(Tensor g, Tensor? cu_seqlens, SymInt tokens) -> Tensor");
  m.def("merge_attention_states(Tensor out_a, Tensor lse_a, Tensor out_b, Tensor lse_b) -> (Tensor out, Tensor lse)");
}

// One kernel per op serves both devices: each call reads its device from its tensors.
STABLE_TORCH_LIBRARY_IMPL(ejk, CPU, m) {
  m.impl("flash_attention", TORCH_BOX(&ejk::torch_ops::flash_attention));
  m.impl("mean_pooling", TORCH_BOX(&ejk::torch_ops::mean_pooling));
  m.impl("mean_pooling_backward", TORCH_BOX(&ejk::torch_ops::mean_pooling_backward));
  m.impl("merge_attention_states", TORCH_BOX(&ejk::torch_ops::merge_attention_states));
}

STABLE_TORCH_LIBRARY_IMPL(ejk, CUDA, m) {
  m.impl("flash_attention", TORCH_BOX(&ejk::torch_ops::flash_attention));
  m.impl("mean_pooling", TORCH_BOX(&ejk::torch_ops::mean_pooling));
  m.impl("mean_pooling_backward", TORCH_BOX(&ejk::torch_ops::mean_pooling_backward));
  m.impl("merge_attention_states", TORCH_BOX(&ejk::torch_ops::merge_attention_states));
}

// Installs the compile observer; a compile of at least `seconds` is reported on stderr.
extern "C" __attribute__((visibility("default"))) void ejk_torch_set_compile_notice(double seconds) {
  ejk::python::CompileNotice::install(seconds);
}
