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
#include "ejk/kernels/cuda/wgmma/all.cuh"  // every variant's wgmma shapes

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

// Both families take the tensor maps (one signature, as the template generates it).
template <class C>
__global__ void __launch_bounds__(C::kThreads) flash_kernel(const __grid_constant__ ejk::FlashFwdParams p,
                                                            const __grid_constant__ ejk::cuda::FlashFwdTensorMaps) {
  ejk::cuda::flash_fwd_sm80<C>(p);
}

// (threads, 1): the register cap at entry that setmaxnreg needs (docs/design/flash_fwd_cuda.md).
template <class C>
__global__ void __launch_bounds__(C::kThreads, 1) flash_kernel_sm90(const __grid_constant__ ejk::FlashFwdParams p,
                                                                    const __grid_constant__ ejk::cuda::FlashFwdTensorMaps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  ejk::cuda::flash_fwd_sm90<C>(p, maps);
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
  ejk::cuda::Sm90Schedule schedule = ejk::cuda::Sm90Schedule::by_default;  // wgmma family
  bool persistent = false;  // what the schedule (or the geometry's default) makes it
  ejk::cuda::Sm90QOperand q_operand = ejk::cuda::Sm90QOperand::by_default;  // wgmma family
  std::string name() const {
    std::string n = std::string(f16 ? "f16" : "bf16") + ".d" + std::to_string(head_dim) +
                    ".bq" + std::to_string(block_q) + ".bk" + std::to_string(block_k);
    if (flags.causal) n += ".causal";
    if (flags.window) n += ".win";
    if (flags.segments) n += ".seg";
    if (flags.softcap) n += ".cap";
    if (flags.sinks) n += ".sink";
    if (flags.bias) n += ".bias";
    if (rows_per_warp != 16) n += ".w" + std::to_string(rows_per_warp);
    if (sm90) n += ".wgmma";
    if (sm90 && !pingpong) n += ".nopp";
    if (stages) n += ".st" + std::to_string(stages);
    if (schedule != ejk::cuda::Sm90Schedule::by_default) n += persistent ? ".persist" : ".per_item";
    if (q_operand != ejk::cuda::Sm90QOperand::by_default)
      n += q_operand == ejk::cuda::Sm90QOperand::registers ? ".qreg" : ".qsmem";
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

template <Elem E, int D, int Br, int Bc, FlashFlags F, bool kPingPong = true, int kStages = 0,
          ejk::cuda::Sm90Schedule kSchedule = ejk::cuda::Sm90Schedule::by_default,
          ejk::cuda::Sm90QOperand kQ = ejk::cuda::Sm90QOperand::by_default>
inline Variant variant_sm90() {
  using C = ejk::cuda::FlashFwdSm90Config<E, D, Br, Bc, F, kPingPong, kStages, kSchedule, kQ>;
  const void* k = reinterpret_cast<const void*>(&flash_kernel_sm90<C>);
  const int smem = int(C::kGeometry.smem_bytes());
  CUDA_OK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  Variant v{E == Elem::f16, D, Br, Bc, F, k, C::kThreads, smem, 16, true, kPingPong, kStages};
  v.schedule = kSchedule;
  v.persistent = C::kPersistent;
  v.q_operand = kQ;
  return v;
}

constexpr FlashFlags kPlain{};
constexpr FlashFlags kCausal{.causal = true};

// cuTensorMapEncodeTiled through the runtime's driver entry point (no -lcuda).
using EncodeTiledFn = int (*)(void* map, int dtype, unsigned rank, void* addr, const ejk::u64* dims,
                              const ejk::u64* strides, const unsigned* box, const unsigned* elem_strides,
                              int interleave, int swizzle, int l2_promotion, int oob_fill);

inline EncodeTiledFn encode_tiled() {
  static EncodeTiledFn fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    CUDA_OK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q));
    if (p == nullptr) {
      std::fprintf(stderr, "cuTensorMapEncodeTiled not found in the driver\n");
      std::exit(2);
    }
    return reinterpret_cast<EncodeTiledFn>(p);
  }();
  return fn;
}

// Persistent grids take one block per SM; EJK_PERSISTENT_GRID=n caps that (the check runs
// with a small n so that every block loops over many work items even on small problems).
inline int sm_count() {
  static int n = [] {
    if (const char* cap = std::getenv("EJK_PERSISTENT_GRID")) return std::atoi(cap);
    int dev = 0, c = 0;
    CUDA_OK(cudaGetDevice(&dev));
    CUDA_OK(cudaDeviceGetAttribute(&c, cudaDevAttrMultiProcessorCount, dev));
    return c;
  }();
  return n;
}

// The launch of one variant on one problem: grid and (wgmma family) tensor maps, prepared
// outside any timed region.
struct Prepared {
  dim3 grid;
  ejk::cuda::FlashFwdTensorMaps maps{};
};

inline Prepared prepare(const Variant& v, const ejk::FlashFwdParams& p) {
  Prepared r;
  if (!v.sm90) {
    const ejk::cuda::FlashFwdSm80Geometry g{v.head_dim, v.block_q, v.block_k, v.rows_per_warp};
    r.grid = dim3(unsigned(g.grid_x(p)), unsigned(g.grid_y(p)), unsigned(g.grid_z(p)));
    return r;
  }
  const ejk::cuda::FlashFwdSm90Geometry g{v.head_dim, v.block_q,    v.block_k,     v.stages,
                                          v.schedule, v.q_operand, v.flags.bias};
  r.grid = dim3(unsigned(g.blocks(p, sm_count())));
  using ejk::cuda::FlashTensor;
  for (FlashTensor t : ejk::cuda::flash_fwd_tensors(p, g.bias_staged())) {
    const ejk::cuda::TmaTensorView tv = ejk::cuda::flash_fwd_tma_view(p, t, g);
    const unsigned ones[4] = {1, 1, 1, 1};
    // uint16 (the copy moves bits), no interleave, 128-byte swizzle, 256-byte L2 promotion,
    // zero fill out of bounds.
    const int rc = encode_tiled()(&ejk::cuda::tensor_map(r.maps, t), 1, 4, const_cast<void*>(tv.base), tv.dims, tv.strides,
                                  tv.box, ones, 0, 3, 3, 0);
    if (rc != 0) {
      std::fprintf(stderr, "cuTensorMapEncodeTiled failed (%d) for %s\n", rc, ejk::cuda::flash_tensor_name(t));
      std::exit(2);
    }
  }
  return r;
}

// The tile counter (FlashFwdParams::tile_counter) of every sm90a launch here: all of them go to
// the default stream, one after the other, so one counter serves. EJK_NO_TILE_COUNTER=1 leaves
// the pointer null (the kernels' path without a counter, for its own check).
inline unsigned* tile_counter() {
  static unsigned* counter = [] {
    const char* s = std::getenv("EJK_NO_TILE_COUNTER");
    if (s != nullptr && s[0] == '1') return static_cast<unsigned*>(nullptr);
    unsigned* c = nullptr;
    CUDA_OK(cudaMalloc(&c, 2 * sizeof(unsigned)));
    CUDA_OK(cudaMemset(c, 0, 2 * sizeof(unsigned)));
    return c;
  }();
  return counter;
}

// Whether the launches so far left the tile counter at zero, as each must for the next
// (flash_fwd_sm90_schedule.cuh sm90_draw). Synchronizes.
inline bool tile_counter_left_zero() {
  if (tile_counter() == nullptr) return true;
  unsigned c[2] = {1, 1};
  CUDA_OK(cudaMemcpy(c, tile_counter(), sizeof(c), cudaMemcpyDeviceToHost));
  return c[0] == 0 && c[1] == 0;
}

inline void launch(const Variant& v, const ejk::FlashFwdParams& p, const Prepared& pre,
                   cudaStream_t stream = 0) {
  ejk::FlashFwdParams copy = p;
  if (v.sm90 && copy.tile_counter == nullptr) copy.tile_counter = tile_counter();
  void* args[] = {&copy, const_cast<ejk::cuda::FlashFwdTensorMaps*>(&pre.maps)};
  CUDA_OK(cudaLaunchKernel(v.kernel, pre.grid, dim3(v.threads), args, size_t(v.smem), stream));
}

inline void launch(const Variant& v, const ejk::FlashFwdParams& p, cudaStream_t stream = 0) {
  launch(v, p, prepare(v, p), stream);
}

}  // namespace ejk::check
