#include "cuda/cuda_driver.h"

#include <dlfcn.h>

#include <type_traits>

#include "ejk/core/error.h"

namespace ejk::cuda {
namespace {

struct LoadResult {
  CudaDriver driver{};
  bool ok = false;
  std::string why;
};

// Resolves every entry point; the first missing one names itself in the reason.
bool resolve_all(void* lib, CudaDriver& d, std::string& why) {
  bool ok = true;
  auto sym = [&](auto& fn, const char* name) {
    if (!ok) return;
    void* p = dlsym(lib, name);
    if (p == nullptr) {
      why = std::string("libcuda.so.1 lacks ") + name + " (driver too old?)";
      ok = false;
      return;
    }
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  sym(d.cuInit, "cuInit");
  sym(d.cuDriverGetVersion, "cuDriverGetVersion");
  sym(d.cuGetErrorName, "cuGetErrorName");
  sym(d.cuGetErrorString, "cuGetErrorString");
  sym(d.cuDeviceGetCount, "cuDeviceGetCount");
  sym(d.cuDeviceGet, "cuDeviceGet");
  sym(d.cuDeviceGetAttribute, "cuDeviceGetAttribute");
  sym(d.cuDeviceGetName, "cuDeviceGetName");
  sym(d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  sym(d.cuCtxSetCurrent, "cuCtxSetCurrent");
  sym(d.cuCtxSynchronize, "cuCtxSynchronize");
  sym(d.cuModuleLoadData, "cuModuleLoadData");
  sym(d.cuModuleUnload, "cuModuleUnload");
  sym(d.cuModuleGetFunction, "cuModuleGetFunction");
  sym(d.cuFuncGetAttribute, "cuFuncGetAttribute");
  sym(d.cuFuncSetAttribute, "cuFuncSetAttribute");
  sym(d.cuLaunchKernel, "cuLaunchKernel");
  sym(d.cuMemAlloc, "cuMemAlloc_v2");
  sym(d.cuMemFree, "cuMemFree_v2");
  sym(d.cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  sym(d.cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  sym(d.cuMemsetD8, "cuMemsetD8_v2");
  sym(d.cuMemAllocAsync, "cuMemAllocAsync");
  sym(d.cuMemFreeAsync, "cuMemFreeAsync");
  sym(d.cuStreamCreate, "cuStreamCreate");
  sym(d.cuStreamDestroy, "cuStreamDestroy_v2");
  sym(d.cuStreamSynchronize, "cuStreamSynchronize");
  sym(d.cuStreamIsCapturing, "cuStreamIsCapturing");
  sym(d.cuMemsetD8Async, "cuMemsetD8Async");
  sym(d.cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled");
  return ok;
}

LoadResult load_once() {
  LoadResult r;
  // RTLD_LOCAL: the driver's symbols stay out of the global namespace of the host program.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    r.why = std::string("libcuda.so.1 not found (no NVIDIA driver on this machine): ") +
            (err ? err : "dlopen failed");
    return r;
  }
  if (!resolve_all(lib, r.driver, r.why)) return r;
  const CUresult init = r.driver.cuInit(0);
  if (init != 0) {
    const char* name = nullptr;
    r.driver.cuGetErrorName(init, &name);
    r.why = std::string("cuInit failed: ") + (name ? name : "error " + std::to_string(init));
    return r;
  }
  int count = 0;
  if (r.driver.cuDeviceGetCount(&count) != 0 || count == 0) {
    r.why = "the CUDA driver reports no device";
    return r;
  }
  r.ok = true;
  return r;  // the library stays loaded for the life of the process
}

const LoadResult& loaded() {
  static const LoadResult result = load_once();  // thread-safe initialisation
  return result;
}

}  // namespace

const CudaDriver* CudaDriver::load(std::string* why) {
  const LoadResult& r = loaded();
  if (!r.ok && why != nullptr) *why = r.why;
  return r.ok ? &r.driver : nullptr;
}

const CudaDriver& CudaDriver::get() {
  std::string why;
  const CudaDriver* d = load(&why);
  if (d == nullptr) throw BackendUnavailable("CUDA backend unavailable: " + why);
  return *d;
}

void CudaDriver::check(CUresult r, const char* what) const {
  if (r == 0) return;
  const char *name = nullptr, *text = nullptr;
  cuGetErrorName(r, &name);
  cuGetErrorString(r, &text);
  throw Error(std::string("CUDA driver: ") + what + ": " + (name ? name : std::to_string(r)) +
              ": " + (text ? text : "unknown error"));
}

}  // namespace ejk::cuda
