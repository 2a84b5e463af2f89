// The CUDA path of ejk::flash_attention: key for the device's arch, cubin, launch.
#include <fmt/format.h>

#include <map>
#include <mutex>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_driver.h"
#include "cuda_variants.h"
#include "ejk/core/error.h"
#include "flash_dispatch.h"
#include "registry.h"

namespace ejk::detail {
namespace {

// Sinks live on the device while the kernel reads them. One grow-only buffer per device: the
// upload (cuMemcpyHtoD, synchronous and on the legacy stream like our launches) cannot
// overtake a previous launch that still reads the buffer.
const float* upload_sinks(const std::vector<float>& sinks, int ordinal) {
  struct Buffer { cuda::CUdeviceptr ptr = 0; size_t bytes = 0; };
  static std::mutex mu;
  static std::map<int, Buffer> buffers;
  const auto& drv = cuda::CudaDriver::get();
  size_t bytes = sinks.size() * sizeof(float);
  std::lock_guard lk(mu);
  Buffer& b = buffers[ordinal];
  if (b.bytes < bytes) {
    if (b.ptr) drv.check(drv.cuMemFree(b.ptr), "cuMemFree");
    drv.check(drv.cuMemAlloc(&b.ptr, bytes), "cuMemAlloc (sinks)");
    b.bytes = bytes;
  }
  drv.check(drv.cuMemcpyHtoD(b.ptr, sinks.data(), bytes), "cuMemcpyHtoD (sinks)");
  return reinterpret_cast<const float*>(b.ptr);
}

}  // namespace

RunInfo run_flash_cuda(FlashProblem& pb, const FlashAttentionOptions& opt) {
  const auto& dev = cuda::use_device(pb.device.index);
  const OpSchema& schema = op_schema("flash_fwd");
  VariantKey key = flash_key(schema, pb, opt, "cuda", dev.target);
  require_variant_covers(key, pb.params);
  CudaVariant v = acquire_cuda_variant(schema, key, pb.device.index);
  pb.params.softmax_aux = pb.sinks ? upload_sinks(pb.sinks_f32, pb.device.index) : nullptr;
  auto shape = cuda::flash_fwd_launch_shape(key.target, key.get_int("head_dim"), key.get_int("block_q"),
                                            key.get_int("block_k"), pb.params, dev.sm_count,
                                            key.get_flag("per_item"), key.get_flag("bias"));
  // The bias copy only where this launch needs it: built ahead of time for the AOT targets,
  // so it costs a JIT compile only on a target the build left out.
  CudaVariant copy;
  if (!cuda::bias_reads_in_place(pb.params, shape.bias_chunks))
    copy = acquire_cuda_variant(op_schema("flash_fwd_bias_rows"), bias_rows_key(key.target),
                                pb.device.index);
  cuda::launch_flash_fwd(*v.kernel, shape, pb.params, dev, nullptr, copy.kernel.get());
  RunInfo info;
  info.key = to_string(key);
  info.backend = Backend::cuda;
  info.source = v.source;
  info.compile_ms = v.compile_ms;
  info.load_ms = v.load_ms;
  return info;
}

}  // namespace ejk::detail
