#include "device_memory.h"

#include <fmt/format.h>

#include <cstring>

#include "ejk/core/error.h"
#if EJK_HAVE_CUDA
#include "cuda/device.h"
#include "cuda/cuda_driver.h"
#endif

namespace ejk::detail {
namespace {

[[noreturn]] void unsupported(Device d) {
  throw BackendUnavailable(fmt::format("memory on {}: this build has no backend for it", to_string(d)));
}

#if EJK_HAVE_CUDA
const cuda::CudaDriver& driver_for(Device d) {
  cuda::use_device(d.index);  // makes the device's primary context current on this thread
  return cuda::CudaDriver::get();
}
#endif

}  // namespace

void* device_alloc(Device d, size_t bytes) {
  if (d.kind == DeviceKind::cpu) unsupported(d);  // CPU tensors use aligned_alloc directly
#if EJK_HAVE_CUDA
  if (d.kind == DeviceKind::cuda) {
    const auto& drv = driver_for(d);
    cuda::CUdeviceptr p = 0;
    drv.check(drv.cuMemAlloc(&p, bytes ? bytes : 1), "cuMemAlloc");
    return reinterpret_cast<void*>(p);
  }
#endif
  unsupported(d);
}

void device_free(Device d, void* p) noexcept {
#if EJK_HAVE_CUDA
  if (d.kind == DeviceKind::cuda && p) {
    try {
      const auto& drv = driver_for(d);
      drv.cuMemFree(reinterpret_cast<cuda::CUdeviceptr>(p));
    } catch (...) {  // freeing during shutdown after the driver is gone: nothing to do
    }
  }
#else
  (void)d;
  (void)p;
#endif
}

void copy_to_host(Device src_device, const void* src, void* dst, size_t bytes) {
  if (src_device.kind == DeviceKind::cpu) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if EJK_HAVE_CUDA
  if (src_device.kind == DeviceKind::cuda) {
    const auto& drv = driver_for(src_device);
    drv.check(drv.cuMemcpyDtoH(dst, reinterpret_cast<cuda::CUdeviceptr>(src), bytes), "cuMemcpyDtoH");
    return;
  }
#endif
  unsupported(src_device);
}

void copy_from_host(Device dst_device, void* dst, const void* src, size_t bytes) {
  if (dst_device.kind == DeviceKind::cpu) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if EJK_HAVE_CUDA
  if (dst_device.kind == DeviceKind::cuda) {
    const auto& drv = driver_for(dst_device);
    drv.check(drv.cuMemcpyHtoD(reinterpret_cast<cuda::CUdeviceptr>(dst), src, bytes), "cuMemcpyHtoD");
    return;
  }
#endif
  unsupported(dst_device);
}

}  // namespace ejk::detail

namespace ejk {

void synchronize(Device d, void* stream) {
  if (d.kind == DeviceKind::cpu) return;
#if EJK_HAVE_CUDA
  if (d.kind == DeviceKind::cuda) {
    const auto& drv = detail::driver_for(d);
    if (stream != nullptr)
      drv.check(drv.cuStreamSynchronize(static_cast<cuda::CUstream>(stream)), "cuStreamSynchronize");
    else
      drv.check(drv.cuCtxSynchronize(), "cuCtxSynchronize");
    return;
  }
#else
  (void)stream;
#endif
  detail::unsupported(d);
}

}  // namespace ejk

namespace ejk::detail {

bool cuda_usable(std::string* why) {
#if EJK_HAVE_CUDA
  try {
    cuda::use_device(0);
    return true;
  } catch (const std::exception& e) {
    if (why) *why = e.what();
    return false;
  }
#else
  if (why) *why = "this build has no CUDA backend (configured with EJK_ENABLE_CUDA=OFF)";
  return false;
#endif
}

}  // namespace ejk::detail
