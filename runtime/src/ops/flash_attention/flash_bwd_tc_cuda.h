// The flash tensor-core backward's host side, shared by flash_attention_backward and
// blocksparse_attention_backward (which drives the same kernels through its own walk): the
// 16-byte row check of its operands (the forward's too) and its four launches in stream order (delta into the
// scratch, dK/dV, dQ, the sink rows' dsoftmax_aux). Built with CUDA only.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>

#include "ejk/kernels/common/flash_bwd_params.h"
#include "engine/cuda_exec.h"

namespace ejk::ops {

// `blocks` as a grid's x dimension, or InvalidArgument naming op and what the blocks are.
unsigned flash_grid_x(const std::string& op, const char* what, int64_t blocks);

// A tensor of 16-bit [batch, sequence, head, head_dim] rows as the kernels read it.
struct FlashRows {
  const void* base;
  int64_t sb, ss, sh;
  const char* name;
};
// InvalidArgument naming the operand unless every one's rows can be read in 16-byte chunks
// (cp.async).
void require_flash_rows(const std::string& op, int64_t head_dim, std::initializer_list<FlashRows> rows);
// The same for the backward's q, k, v, d_out, dq, dk and dv.
void require_flash_bwd_rows(const std::string& op, const FlashBwdParams& p);

struct FlashBwdTcLaunch {
  int64_t block_q, block_k;
  int64_t lse_rows;                         // query rows of lse's layout (delta has them too)
  int64_t sinks;                            // blocks of the sink-row launch (0: none)
  int64_t kv_extra_smem = 0, q_extra_smem = 0;  // past the kernels' own (a walk's bitmaps)
  bool wgmma = false;                           // the sm90a kernels (flash_bwd_wgmma): dQ blocks swapped
};

// The four launches; p lives inside the params `args` points at (its phase and delta are set
// here, each launch copies the params).
void launch_flash_bwd_tc(const std::string& op, FlashBwdParams& p, void** args, const FlashBwdTcLaunch& l,
                         engine::CudaLaunchContext& lc);

}  // namespace ejk::ops
