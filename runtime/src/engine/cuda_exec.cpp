#include "engine/cuda_exec.h"

#include <fmt/format.h>

#include <map>
#include <memory>
#include <mutex>

#include "ejk/core/error.h"
#include "engine/call.h"

namespace ejk::engine {
namespace {

void refuse_in_capture(const cuda::CudaDriver& d, cuda::CUstream stream, const char* what, size_t bytes) {
  int status = 0;
  d.check(d.cuStreamIsCapturing(stream, &status), "cuStreamIsCapturing");
  if (status != 0)
    throw InvalidArgument(fmt::format("the stream's workspace must grow ({} to {} bytes) while the stream is captured "
                                      "into a CUDA graph: call ejk::plan() for this call, or run it once on the stream, "
                                      "before the capture", what, bytes));
}

}  // namespace

void StreamWorkspace::reserve(size_t scratch_bytes, size_t counter_bytes, cuda::CUstream stream) {
  if (scratch_bytes > scratch_bytes_) grow_scratch(scratch_bytes, stream);
  if (counter_bytes > counter_bytes_) grow_counters(counter_bytes, stream);
}

void StreamWorkspace::grow_scratch(size_t bytes, cuda::CUstream stream) {
  const cuda::CudaDriver& d = cuda::CudaDriver::get();
  refuse_in_capture(d, stream, "scratch", bytes);
  // Stream-ordered: the old buffer is freed after the work already queued on the stream (which
  // may still read it); allocating per call instead cost milliseconds for large buffers.
  if (scratch_ != 0) d.check(d.cuMemFreeAsync(scratch_, stream), "cuMemFreeAsync (workspace)");
  scratch_ = 0, scratch_bytes_ = 0;
  const size_t rounded = (bytes + 255) / 256 * 256;
  d.check(d.cuMemAllocAsync(&scratch_, rounded, stream), "cuMemAllocAsync (workspace)");
  scratch_bytes_ = rounded;
}

void StreamWorkspace::grow_counters(size_t bytes, cuda::CUstream stream) {
  const cuda::CudaDriver& d = cuda::CudaDriver::get();
  refuse_in_capture(d, stream, "counters", bytes);
  const size_t rounded = (bytes + 255) / 256 * 256;
  cuda::CUdeviceptr fresh = 0;
  d.check(d.cuMemAllocAsync(&fresh, rounded, stream), "cuMemAllocAsync (counters)");
  d.check(d.cuMemsetD8Async(fresh, 0, rounded, stream), "cuMemsetD8Async (counters)");
  // The old counters are zero (every launch leaves them so) and unused once the stream moves on.
  if (counters_ != 0) d.check(d.cuMemFreeAsync(counters_, stream), "cuMemFreeAsync (counters)");
  counters_ = fresh, counter_bytes_ = rounded;
}

StreamWorkspace& stream_workspace(int device, cuda::CUstream stream) {
  // One thread's calls go to one stream back to back: skip the lock and the lookup.
  thread_local int last_device = -1;
  thread_local cuda::CUstream last_stream = nullptr;
  thread_local StreamWorkspace* last = nullptr;
  if (last != nullptr && device == last_device && stream == last_stream) return *last;
  static std::mutex mu;
  static std::map<std::pair<int, cuda::CUstream>, std::unique_ptr<StreamWorkspace>> spaces;
  std::lock_guard lk(mu);
  auto& ws = spaces[{device, stream}];
  if (!ws) ws = std::make_unique<StreamWorkspace>();
  last_device = device, last_stream = stream, last = ws.get();
  return *ws;
}

cuda::LoadedKernel& CudaLaunchContext::kernel(size_t i) const {
  const Variant& v = i == 0 ? plan_.main : plan_.companions.at(i - 1);
  return *v.cuda;
}

void CudaLaunchContext::launch(size_t k, Grid grid, unsigned block, unsigned smem_bytes, void** args) const {
  cuda::LoadedKernel& kernel = this->kernel(k);
  if (int64_t(smem_bytes) > device_.max_smem_optin)
    throw InvalidArgument(fmt::format("CUDA {}: needs {} bytes of shared memory; {} allows {}: use smaller blocks",
                                      kernel.symbol(), smem_bytes, device_.name, device_.max_smem_optin));
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
  kernel.reserve_dynamic_smem(int(smem_bytes));
  const cuda::CudaDriver& d = cuda::CudaDriver::get();
  const cuda::CUresult r = d.cuLaunchKernel(kernel.function(), grid.x, grid.y, grid.z, block, 1, 1, smem_bytes,
                                            stream_, args, nullptr);
  if (r != 0) d.check(r, ("launching " + kernel.symbol()).c_str());
}

}  // namespace ejk::engine
