// The CUDA launch plan of flash_attention: grid, block and shared memory of a key's kernel
// family (kernels/ejk/kernels/cuda/flash_fwd_traits.cuh, shared with the kernels), the TMA
// tensor maps of the sm90a family, the bias copy where a bias cannot be read in place, and the
// sm80 family's slicing of problems past the grid's limits. Launches go through the engine's
// CudaLaunchContext.
#pragma once
#include <cstdint>

#include "ejk/core/schema.h"
#include "ejk/kernels/common/flash_params.h"
#include "engine/cuda_exec.h"
#include "ops/flash_attention/flash_op.h"

namespace ejk::ops {

struct FlashLaunchShape {
  unsigned grid[3] = {1, 1, 1};
  unsigned block = 1;
  unsigned smem_bytes = 0;
  // sm90a family: q, k and v are read through TMA tensor maps, built at launch from the params
  // and this tile shape; its persistent blocks draw work from a counter of the stream's.
  bool tma = false;
  int64_t head_dim = 0, block_q = 0, block_k = 0;
  // sm80 family: q heads on gridDim.y and sequences on gridDim.z, at most 65535 of each per
  // launch; a larger problem runs as several launches over slices (flash_fwd_slice).
  int64_t heads_q = 0, sequences = 0;
  // The kernel stages its bias by TMA boxes (else it reads 4-byte pairs): bias_reads_in_place.
  bool bias_chunks = false;
  int64_t launches() const;
};

// The tile facts of a key (FlashKeyFacts, flash_op.h), read from its axes and its target's spec vars.
FlashKeyFacts flash_key_facts(const OpSchema& schema, const VariantKey& key);

// Dynamic shared memory a key launches with (for reports without params, e.g. `ejk compile`).
int64_t flash_fwd_smem_bytes(const FlashKeyFacts& f);

// Grid, block and shared memory of a key's kernel for params `p` on a device of `sm_count` SMs.
// InvalidArgument naming the axes for a tile no family builds, or a problem past the limits.
FlashLaunchShape flash_fwd_launch_shape(const FlashKeyFacts& f, const FlashFwdParams& p, int sm_count);

// The part of `p` that heads [h0, h0 + nh) of sequences [z0, z0 + nz) see, as a problem of its
// own; h0 and nh are multiples of the GQA group.
FlashFwdParams flash_fwd_slice(const FlashFwdParams& p, int64_t h0, int64_t nh, int64_t z0, int64_t nz);

// True when a kernel can read p's bias as it is. By TMA (`chunks`): a 16-byte aligned base and
// strides that are multiples of 8; as 4-byte pairs: a 4-byte aligned base, even strides and an
// even key extent. No bias: true.
bool bias_reads_in_place(const FlashFwdParams& p, bool chunks);

// Scratch bytes the bias copy needs for p (0 when the bias reads in place).
size_t bias_copy_bytes(const FlashFwdParams& p, bool chunks);

// Checks the kernel's memory preconditions (16-byte aligned q/k/v/out, strides multiples of 8
// elements), copies a bias that cannot be read in place with lc.kernel(1) into lc.scratch(),
// builds the tensor maps (sm90a), and launches lc.kernel(0) (sliced for sm80 past 65535).
// dropout: the key's dropout arguments (null for keys without dropout).
void launch_flash_fwd(engine::CudaLaunchContext& lc, const FlashLaunchShape& shape, FlashFwdParams p,
                      const DropoutParams* dropout = nullptr);

}  // namespace ejk::ops
