// The CUDA driver API, loaded at run time with dlopen("libcuda.so.1").
//
// The library never links libcuda: a binary linked to it (or to the toolkit's stub) fails to
// start, or gets cuInit error 34, on a machine without the NVIDIA driver. Loading it here lets
// the same libejk run everywhere and fall back to the CPU with a message saying why.
// Only the entry points the backend uses are declared, with the driver's own ABI (the _v2
// symbol names the toolkit's cuda.h maps the plain names to).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace ejk::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;

// The few enum values used, with the numbers of the driver ABI (cuda.h).
enum : int {
  kAttrMultiprocessorCount = 16,
  kAttrComputeCapabilityMajor = 75,
  kAttrComputeCapabilityMinor = 76,
  kAttrMaxSharedMemoryPerBlockOptin = 97,
};
// CUtensorMap encoding (cuda.h's CUtensorMapDataType, ...Swizzle, ...L2promotion, ...OOBfill).
enum : int {
  kTensorMapUint16 = 1,
  kTensorMapSwizzle128B = 3,
  kTensorMapL2Promotion256B = 3,
  kTensorMapOobFillZero = 0,
};
enum : int {
  kFuncAttrMaxThreadsPerBlock = 0,
  kFuncAttrSharedSizeBytes = 1,
  kFuncAttrLocalSizeBytes = 3,
  kFuncAttrNumRegs = 4,
  kFuncAttrMaxDynamicSharedSizeBytes = 8,
};

struct CudaDriver {
  CUresult (*cuInit)(unsigned flags);
  CUresult (*cuDriverGetVersion)(int* version);
  CUresult (*cuGetErrorName)(CUresult, const char** name);
  CUresult (*cuGetErrorString)(CUresult, const char** text);
  CUresult (*cuDeviceGetCount)(int* count);
  CUresult (*cuDeviceGet)(CUdevice* dev, int ordinal);
  CUresult (*cuDeviceGetAttribute)(int* value, int attribute, CUdevice dev);
  CUresult (*cuDeviceGetName)(char* name, int len, CUdevice dev);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext* ctx, CUdevice dev);
  CUresult (*cuCtxSetCurrent)(CUcontext ctx);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuModuleLoadData)(CUmodule* mod, const void* image);
  CUresult (*cuModuleUnload)(CUmodule mod);
  CUresult (*cuModuleGetFunction)(CUfunction* fn, CUmodule mod, const char* name);
  CUresult (*cuFuncGetAttribute)(int* value, int attribute, CUfunction fn);
  CUresult (*cuFuncSetAttribute)(CUfunction fn, int attribute, int value);
  CUresult (*cuLaunchKernel)(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned by, unsigned bz, unsigned smem, CUstream stream,
                             void** params, void** extra);
  CUresult (*cuMemAlloc)(CUdeviceptr* ptr, size_t bytes);
  CUresult (*cuMemFree)(CUdeviceptr ptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr dst, const void* src, size_t bytes);
  CUresult (*cuMemcpyDtoH)(void* dst, CUdeviceptr src, size_t bytes);
  CUresult (*cuMemsetD8)(CUdeviceptr dst, unsigned char value, size_t bytes);
  // Stream-ordered scratch (CUDA 11.2+ drivers): the copy of a bias the kernels cannot read as
  // it is (runtime/src/ops/flash_attention/flash_cuda.cpp align_bias).
  CUresult (*cuMemAllocAsync)(CUdeviceptr* ptr, size_t bytes, CUstream stream);
  CUresult (*cuMemFreeAsync)(CUdeviceptr ptr, CUstream stream);
  // Streams: the runtime launches on the caller's; the device tests make their own.
  CUresult (*cuStreamCreate)(CUstream* stream, unsigned flags);
  CUresult (*cuStreamDestroy)(CUstream stream);
  CUresult (*cuStreamSynchronize)(CUstream stream);
  // Whether a stream is being captured into a CUDA graph (status 0: no): workspace may grow only
  // outside a capture.
  CUresult (*cuStreamIsCapturing)(CUstream stream, int* status);
  CUresult (*cuMemsetD8Async)(CUdeviceptr dst, unsigned char value, size_t bytes, CUstream stream);
  // TMA descriptors of the sm90a kernels (CUDA 12.0+ drivers). The enum arguments are passed
  // as their ABI integers; `map` is a 128-byte, 64-byte aligned CUtensorMap.
  CUresult (*cuTensorMapEncodeTiled)(void* map, int dtype, unsigned rank, void* global_address,
                                     const uint64_t* dims, const uint64_t* strides_bytes,
                                     const unsigned* box, const unsigned* element_strides,
                                     int interleave, int swizzle, int l2_promotion, int oob_fill);

  // The loaded driver, or nullptr with *why set ("libcuda.so.1 not found: ...", "cuInit
  // failed: CUDA_ERROR_NO_DEVICE ..."). Loads and calls cuInit once per process.
  static const CudaDriver* load(std::string* why = nullptr);
  // The loaded driver; BackendUnavailable with the reason otherwise.
  static const CudaDriver& get();

  // Throws ejk::Error "CUDA driver: <what>: <CUDA_ERROR_...>: <text>" unless r == 0.
  void check(CUresult r, const char* what) const;
};

}  // namespace ejk::cuda
