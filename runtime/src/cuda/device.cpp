#include "cuda/device.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>

#include "ejk/core/error.h"

namespace ejk::cuda {

namespace {

DeviceInfo query_device(const CudaDriver& d, int ordinal, CUdevice dev) {
  DeviceInfo info;
  info.ordinal = ordinal;
  char name[256] = {};
  d.check(d.cuDeviceGetName(name, sizeof(name) - 1, dev), "cuDeviceGetName");
  info.name = name;
  d.check(d.cuDeviceGetAttribute(&info.major, kAttrComputeCapabilityMajor, dev), "compute capability");
  d.check(d.cuDeviceGetAttribute(&info.minor, kAttrComputeCapabilityMinor, dev), "compute capability");
  d.check(d.cuDeviceGetAttribute(&info.sm_count, kAttrMultiprocessorCount, dev), "multiprocessor count");
  d.check(d.cuDeviceGetAttribute(&info.max_smem_optin, kAttrMaxSharedMemoryPerBlockOptin, dev),
          "max shared memory per block (opt-in)");
  return info;
}

}  // namespace

namespace {

struct DeviceEntry {
  CUcontext ctx;
  DeviceInfo info;
};

DeviceEntry& device_entry(const CudaDriver& d, int ordinal) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<DeviceEntry>> devices;  // retained for the process lifetime
  std::lock_guard<std::mutex> lock(mu);
  auto it = devices.find(ordinal);
  if (it == devices.end()) {
    int count = 0;
    d.check(d.cuDeviceGetCount(&count), "cuDeviceGetCount");
    if (ordinal < 0 || ordinal >= count)
      throw InvalidArgument("CUDA device index " + std::to_string(ordinal) + ": expected 0.." +
                            std::to_string(count - 1));
    CUdevice dev = 0;
    d.check(d.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
    auto e = std::make_unique<DeviceEntry>();
    d.check(d.cuDevicePrimaryCtxRetain(&e->ctx, dev), "cuDevicePrimaryCtxRetain");
    e->info = query_device(d, ordinal, dev);
    it = devices.emplace(ordinal, std::move(e)).first;
  }
  return *it->second;
}

}  // namespace

const DeviceInfo& use_device(int ordinal) {
  const CudaDriver& d = CudaDriver::get();
  // Calls come back to back from one thread on one device: skip the lock and the lookup.
  thread_local int last_ordinal = -1;
  thread_local DeviceEntry* last = nullptr;
  if (ordinal != last_ordinal || last == nullptr) {
    last = &device_entry(d, ordinal);
    last_ordinal = ordinal;
  }
  // Always: the caller (a framework) may have made another context current on this thread.
  d.check(d.cuCtxSetCurrent(last->ctx), "cuCtxSetCurrent");
  return last->info;
}

LoadedKernel::LoadedKernel(const std::vector<uint8_t>& cubin, const std::string& symbol)
    : symbol_(symbol) {
  const CudaDriver& d = CudaDriver::get();
  d.check(d.cuModuleLoadData(&module_, cubin.data()), ("loading the cubin of " + symbol).c_str());
  if (CUresult r = d.cuModuleGetFunction(&fn_, module_, symbol.c_str()); r != 0) {
    d.cuModuleUnload(module_);
    d.check(r, ("kernel symbol " + symbol + " in its cubin").c_str());
  }
}

LoadedKernel::~LoadedKernel() {
  if (const CudaDriver* d = CudaDriver::load(); d != nullptr && module_ != nullptr)
    d->cuModuleUnload(module_);  // errors at teardown are not actionable
}

KernelResources LoadedKernel::resources() const {
  const CudaDriver& d = CudaDriver::get();
  KernelResources r;
  int local = 0;
  d.check(d.cuFuncGetAttribute(&r.registers, kFuncAttrNumRegs, fn_), "registers of a kernel");
  d.check(d.cuFuncGetAttribute(&local, kFuncAttrLocalSizeBytes, fn_), "local memory of a kernel");
  d.check(d.cuFuncGetAttribute(&r.static_smem_bytes, kFuncAttrSharedSizeBytes, fn_),
          "static shared memory of a kernel");
  r.stack_bytes = local;  // the driver reports stack frame and spills as one local size
  return r;
}

void LoadedKernel::reserve_dynamic_smem(int bytes) {
  if (bytes <= dynamic_smem_.load(std::memory_order_relaxed)) return;
  const CudaDriver& d = CudaDriver::get();
  d.check(d.cuFuncSetAttribute(fn_, kFuncAttrMaxDynamicSharedSizeBytes, bytes),
          ("raising the shared memory limit of " + symbol_).c_str());
  dynamic_smem_ = bytes;
}

}  // namespace ejk::cuda
