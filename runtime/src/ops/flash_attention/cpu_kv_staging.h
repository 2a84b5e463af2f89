// K and V copied into a head-major layout before the CPU kernels run, where that pays.
//
// In the API's [B, S, H, D] layout one head's rows sit H * D elements apart: 4 KiB at H = 16,
// D = 128, bf16. Rows that far apart share a few cache sets, so the K/V of one head, which
// every query block of that head (and every q head of its GQA group) reads again, does not stay
// in L2, and every row is another page for the TLB. One parallel copy to [B, Hkv, S, D] costs a
// pass over K and V; afterwards each re-read streams contiguous rows. The kernels take any
// strides, so only the params change; results are bitwise the same.
#pragma once
#include <cstdint>

#include "ejk/dtype.h"
#include "ejk/kernels/common/flash_params.h"

namespace ejk::detail {

// Whether staging pays for this problem: rows of a kv head not adjacent, and each kv head's
// rows read by at least two query blocks. EJK_CPU_STAGE_KV=0 turns it off (it holds a copy
// of K and V per calling thread), =1 forces it on wherever the layout allows (for tests).
bool kv_staging_wanted(const FlashFwdParams& p, int64_t block_q);

// Copies p.k and p.v to a head-major buffer owned by the calling thread (reused by its next
// call) and re-points p's k/v pointers and strides at it. Uses the global thread pool.
void stage_kv_head_major(FlashFwdParams& p, DType dtype);

}  // namespace ejk::detail
