// CUDA execution: the one place that launches kernels, and the workspace each (device, stream)
// keeps for the process (scratch buffers and work counters), replacing per-op buffers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "cuda/cuda_driver.h"
#include "cuda/device.h"

namespace ejk::engine {

struct PlanData;

struct Grid {
  unsigned x = 1, y = 1, z = 1;
};

// Scratch (contents undefined between calls) and counters (zero before a stream's first launch;
// every launch that uses them leaves them zero) of one stream. Launches on a stream run one
// after another, so ops on one stream may share them; two streams never do.
class StreamWorkspace {
 public:
  // Grows either part to at least the bytes given: scratch in stream order (the old buffer is
  // freed after the work queued on the stream), counters allocated zeroed. Refuses to grow while
  // the stream is captured into a graph (ejk::plan() reserves ahead of a capture).
  void reserve(size_t scratch_bytes, size_t counter_bytes, cuda::CUstream stream);
  void* scratch() const { return reinterpret_cast<void*>(scratch_); }
  uint32_t* counters() const { return reinterpret_cast<uint32_t*>(counters_); }

 private:
  void grow_scratch(size_t bytes, cuda::CUstream stream);
  void grow_counters(size_t bytes, cuda::CUstream stream);
  cuda::CUdeviceptr scratch_ = 0, counters_ = 0;
  size_t scratch_bytes_ = 0, counter_bytes_ = 0;
};

// Whether rows of `head_dim` elements of `elem_bytes` each can be read in 16-byte chunks: every
// base 16-byte aligned, head_dim and every stride the kernel steps by multiples of a chunk.
inline bool chunks16_allowed(int64_t head_dim, int64_t elem_bytes, std::initializer_list<const void*> bases,
                             std::initializer_list<int64_t> strides) {
  const int64_t vec = 16 / elem_bytes;
  bool ok = head_dim % vec == 0;
  for (const void* base : bases) ok = ok && reinterpret_cast<uintptr_t>(base) % 16 == 0;
  for (int64_t st : strides) ok = ok && st % vec == 0;
  return ok;
}

// The workspace of (device, stream), created on first use and kept for the process.
StreamWorkspace& stream_workspace(int device, cuda::CUstream stream);

// What an op's cuda_launch may use: the device, the stream, the plan's kernels and the stream's
// workspace; and launch(), the only caller of cuLaunchKernel.
class CudaLaunchContext {
 public:
  CudaLaunchContext(const cuda::DeviceInfo& device, cuda::CUstream stream, const PlanData& plan,
                    StreamWorkspace& workspace)
      : device_(device), stream_(stream), plan_(plan), ws_(workspace) {}

  const cuda::DeviceInfo& device() const { return device_; }
  cuda::CUstream stream() const { return stream_; }
  // Kernel 0 is the variant; 1.. are its companions, in the order the op listed them.
  cuda::LoadedKernel& kernel(size_t i = 0) const;
  void* scratch() const { return ws_.scratch(); }
  uint32_t* counters() const { return ws_.counters(); }

  // Launches kernel `k` on the stream; `args` as cuLaunchKernel takes them (one pointer per
  // kernel parameter). InvalidArgument when the shared memory exceeds the device's limit. An
  // empty grid launches nothing.
  void launch(size_t k, Grid grid, unsigned block, unsigned smem_bytes, void** args) const;

 private:
  const cuda::DeviceInfo& device_;
  cuda::CUstream stream_;
  const PlanData& plan_;
  StreamWorkspace& ws_;
};

}  // namespace ejk::engine
