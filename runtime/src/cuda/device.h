// The CUDA backend's device side: the device and its primary context, and cubins loaded as
// modules. Compiling (nvrtc_compiler.h), finding a variant (engine/variant_store.h) and
// launching (engine/cuda_exec.h) are separate.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cuda/cuda_driver.h"
#include "cuda/nvrtc_compiler.h"

namespace ejk::cuda {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;      // "NVIDIA H200"
  int major = 0, minor = 0;
  int sm_count = 0;
  int max_smem_optin = 0;  // bytes of dynamic shared memory a block may opt in to
};

// Makes device `ordinal`'s primary context current on the calling thread and returns its
// facts (queried once). BackendUnavailable without a driver/device, InvalidArgument for an
// ordinal out of range.
const DeviceInfo& use_device(int ordinal = 0);

// A cubin loaded into the current context, and one kernel of it. Unloaded on destruction.
class LoadedKernel {
 public:
  // Error if the driver rejects the image (wrong arch) or the symbol is absent.
  LoadedKernel(const std::vector<uint8_t>& cubin, const std::string& symbol);
  ~LoadedKernel();
  LoadedKernel(const LoadedKernel&) = delete;
  LoadedKernel& operator=(const LoadedKernel&) = delete;

  CUfunction function() const { return fn_; }
  const std::string& symbol() const { return symbol_; }
  // From the loaded function: registers, local memory (stack + spills), static shared memory.
  KernelResources resources() const;
  // Opts the kernel in to `bytes` of dynamic shared memory (once per size increase; thread-safe).
  void reserve_dynamic_smem(int bytes);

 private:
  CUmodule module_ = nullptr;
  CUfunction fn_ = nullptr;
  std::string symbol_;
  std::atomic<int> dynamic_smem_{48 * 1024};  // the default limit without opt-in
};

}  // namespace ejk::cuda
