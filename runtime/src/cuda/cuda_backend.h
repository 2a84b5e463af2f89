// The CUDA backend's device side: the device and its primary context, cubins loaded as
// modules, and the launch of a flash forward variant with its family's geometry
// (kernels/ejk/kernels/cuda/flash_fwd_traits.cuh, shared with the kernel).
//
// Compiling (nvrtc_compiler.h) and finding a variant (AOT table, disk cache, JIT) are separate;
// this file only needs cubin bytes and the kernel's symbol.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cuda/cuda_driver.h"
#include "cuda/nvrtc_compiler.h"
#include "ejk/kernels/common/flash_params.h"

namespace ejk::cuda {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;      // "NVIDIA H200"
  int major = 0, minor = 0;
  int sm_count = 0;
  int max_smem_optin = 0;  // bytes of dynamic shared memory a block may opt in to
  std::string target;      // key target the device runs best: "sm90a", "sm80"
};

// The key target for a compute capability: 9.0 -> "sm90a" (wgmma-capable), other 8.x/9.x/10.x+
// -> "sm80" (mma.sync runs on all of them). BackendUnavailable below 8.0.
std::string target_for_capability(int major, int minor);

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
  // Opts the kernel in to `bytes` of dynamic shared memory (once per size increase).
  void reserve_dynamic_smem(int bytes);

 private:
  CUmodule module_ = nullptr;
  CUfunction fn_ = nullptr;
  std::string symbol_;
  int dynamic_smem_ = 48 * 1024;  // the default limit without opt-in
};

struct LaunchShape {
  unsigned grid[3] = {1, 1, 1};
  unsigned block = 1;
  unsigned smem_bytes = 0;
  // sm90a family: q, k and v are read through TMA tensor maps, built at launch from the
  // params and this tile shape.
  bool tma = false;
  int64_t head_dim = 0, block_q = 0, block_k = 0;
  // sm80 family: q heads on gridDim.y and sequences on gridDim.z, at most 65535 of each per
  // launch; a larger problem runs as several launches, each over a slice of at most grid[1]
  // heads (a multiple of the GQA group) and grid[2] sequences (flash_fwd_slice).
  int64_t heads_q = 0, sequences = 0;
  // The kernel stages its bias by TMA (its own map; else it reads 4-byte pairs):
  // bias_reads_in_place.
  bool bias_chunks = false;
  int64_t launches() const;
};

// The part of `p` that heads [h0, h0 + nh) of sequences [z0, z0 + nz) see, as a problem of
// its own: pointers moved to the slice (dense: batch strides; varlen: the cu_seqlens entries,
// whose token offsets stay absolute), heads_q / heads_kv / batch its sizes. h0 and nh are
// multiples of the GQA group (heads_q / heads_kv).
FlashFwdParams flash_fwd_slice(const FlashFwdParams& p, int64_t h0, int64_t nh, int64_t z0,
                               int64_t nz);

// Dynamic shared memory a flash_fwd CUDA variant launches with: its family's launch facts, as
// flash_fwd_launch_shape takes them (for reports without params, e.g. `ejk compile`).
// per_item: the key's `.items` flag (sm90a: one block per work item, no O tile); bias: its
// `.bias` flag (sm90a keys stage the bias in shared memory where it fits).
int64_t flash_fwd_smem_bytes(std::string_view target, int64_t head_dim, int64_t block_q,
                             int64_t block_k, bool per_item = false, bool bias = false);

// Grid, block and dynamic shared memory of a flash_fwd CUDA variant for params `p`; `target` is
// the key's ("sm80", "sm90a"): sm90a tile shapes the wgmma family supports launch that family,
// whose persistent kernels take one block per SM (`sm_count`, the device's) unless the key's
// `.items` flag (per_item) asks for one block per work item.
// InvalidArgument naming the axes for a (head_dim, block_q, block_k) no family can build.
LaunchShape flash_fwd_launch_shape(std::string_view target, int64_t head_dim, int64_t block_q,
                                   int64_t block_k, const FlashFwdParams& p, int sm_count,
                                   bool per_item = false, bool bias = false);

// Runs the bias copy `copy` (a flash_fwd_bias_rows key's kernel: flash_fwd_bias_rows.cuh) on
// `stream`: rows.dst must be 16-byte aligned and hold batches x heads x rows x pitch elements.
void copy_bias_rows(const LoadedKernel& copy, const FlashFwdBiasRows& rows, int sm_count,
                    CUstream stream = nullptr);

// True when a kernel can read p's bias as it is (FlashFwdParams::bias). By TMA (`chunks`, 16
// bytes the unit): a 16-byte aligned base and strides that are multiples of 8; as 4-byte pairs: a
// 4-byte aligned base, even strides and an even key extent. No bias: true.
bool bias_reads_in_place(const FlashFwdParams& p, bool chunks);

// Checks the kernel's memory preconditions (16-byte aligned q/k/v/out, strides multiples of 8
// elements: the kernels move 16-byte chunks, and TMA needs 16-byte strides) and the device's
// shared-memory limit, builds the tensor maps (sm90a family), then launches asynchronously on
// `stream` (null: the legacy default stream). sm90a launches without p.tile_counter get the
// stream's own (one per device and stream, kept for the process). A bias the kernel cannot read in
// place (bias_reads_in_place with shape.bias_chunks) is first copied by `bias_copy`
// (copy_bias_rows), on the stream, into stream-ordered scratch; without it such a bias is an
// InvalidArgument.
void launch_flash_fwd(LoadedKernel& kernel, const LaunchShape& shape, const FlashFwdParams& p,
                      const DeviceInfo& device, CUstream stream = nullptr,
                      const LoadedKernel* bias_copy = nullptr);

}  // namespace ejk::cuda
