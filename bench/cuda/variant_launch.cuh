// The kernels as the standalone check and benchmark launch them: one __global__ wrapper per
// config (what the template generates for the runtime) and a runtime-describable Variant.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

// base.h's neg_inf_f32() is __host__ __device__ but calls the device-only __int_as_float, which
// nvcc's host pass rejects in a mixed host/device TU (NVRTC and -cubin builds never see a host
// pass). Until base.h picks the spelling by __CUDA_ARCH__, the host pass gets a constexpr one.
#if !defined(__CUDA_ARCH__)
#define __int_as_float(bits) __builtin_bit_cast(float, static_cast<unsigned>(bits))
#endif
#include "ejk/kernels/cuda/flash_fwd_sm80.cuh"
#include "ejk/kernels/cuda/flash_fwd_sm90.cuh"

namespace ejk::check {
using ejk::cuda::Elem;
using ejk::cuda::FlashFlags;

#define CUDA_OK(expr)                                                                   \
  do {                                                                                  \
    cudaError_t err_ = (expr);                                                          \
    if (err_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr,                 \
                   cudaGetErrorString(err_));                                           \
      std::exit(2);                                                                     \
    }                                                                                   \
  } while (0)

template <class C>
__global__ void __launch_bounds__(C::kThreads) flash_kernel(const __grid_constant__ ejk::FlashFwdParams p) {
  ejk::cuda::flash_fwd_sm80<C>(p);
}

// (threads, 1): the register cap at entry that setmaxnreg needs (HOPPER.md).
template <class C>
__global__ void __launch_bounds__(C::kThreads, 1) flash_kernel_sm90(const __grid_constant__ ejk::FlashFwdParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  ejk::cuda::flash_fwd_sm90<C>(p);
#else
  __trap();  // wgmma needs sm_90a; the check only launches these on such a device
#endif
}

// One compiled configuration: what it is, and how to launch it.
struct Variant {
  bool f16;
  int head_dim, block_q, block_k;
  FlashFlags flags;
  const void* kernel;
  int threads, smem;
  int rows_per_warp;
  bool sm90 = false;  // the wgmma family
  bool pingpong = true;  // wgmma family: consumer warpgroups alternate their GEMMs
  int stages = 0;  // wgmma family: K/V ring depth when not the default
  std::string name() const {
    std::string n = std::string(f16 ? "f16" : "bf16") + ".d" + std::to_string(head_dim) +
                    ".bq" + std::to_string(block_q) + ".bk" + std::to_string(block_k);
    if (flags.causal) n += ".causal";
    if (flags.window) n += ".win";
    if (flags.softcap) n += ".cap";
    if (flags.sinks) n += ".sink";
    if (flags.bias) n += ".bias";
    if (rows_per_warp != 16) n += ".w" + std::to_string(rows_per_warp);
    if (sm90) n += ".wgmma";
    if (sm90 && !pingpong) n += ".nopp";
    if (stages) n += ".st" + std::to_string(stages);
    return n;
  }
};

template <Elem E, int D, int Br, int Bc, FlashFlags F, int kRowsPerWarp = 0>
inline Variant variant() {
  using C = ejk::cuda::FlashFwdSm80Config<E, D, Br, Bc, F, kRowsPerWarp>;
  const void* k = reinterpret_cast<const void*>(&flash_kernel<C>);
  const int smem = int(C::kGeometry.smem_bytes());
  CUDA_OK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  return {E == Elem::f16, D, Br, Bc, F, k, C::kThreads, smem, int(C::kGeometry.rows_per_warp())};
}

template <Elem E, int D, int Br, int Bc, FlashFlags F, bool kPingPong = true, int kStages = 0>
inline Variant variant_sm90() {
  using C = ejk::cuda::FlashFwdSm90Config<E, D, Br, Bc, F, kPingPong, kStages>;
  const void* k = reinterpret_cast<const void*>(&flash_kernel_sm90<C>);
  const int smem = int(C::kGeometry.smem_bytes());
  CUDA_OK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  return {E == Elem::f16, D, Br, Bc, F, k, C::kThreads, smem, 16, true, kPingPong, kStages};
}

constexpr FlashFlags kPlain{};
constexpr FlashFlags kCausal{.causal = true};

inline void launch(const Variant& v, const ejk::FlashFwdParams& p, cudaStream_t stream = 0) {
  const ejk::cuda::FlashFwdSm80Geometry g{v.head_dim, v.block_q, v.block_k, v.rows_per_warp};
  const dim3 grid(unsigned(g.grid_x(p)), unsigned(g.grid_y(p)), unsigned(g.grid_z(p)));
  void* args[] = {const_cast<ejk::FlashFwdParams*>(&p)};
  CUDA_OK(cudaLaunchKernel(v.kernel, grid, dim3(v.threads), args, size_t(v.smem), stream));
}

}  // namespace ejk::check
