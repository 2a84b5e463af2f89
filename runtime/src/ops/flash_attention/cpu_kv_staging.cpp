#include "ops/flash_attention/cpu_kv_staging.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>

#include <fmt/format.h>

#include "ejk/core/error.h"
#include "thread_pool.h"
#include "util/env.h"

namespace ejk::detail {
namespace {

// Rows per parallel work item: large enough that handing out items costs nothing.
constexpr int64_t kRowsPerItem = 256;
// Transparent huge pages (where the kernel offers them on request) cut the TLB misses of
// the kernels' K/V walks further; the buffer is aligned to them.
constexpr size_t kHugePage = size_t(2) << 20;

// A grow-only scratch buffer of the calling thread. A fresh buffer per call would pay a page
// fault per 4 KiB on first touch, about what the copy itself costs.
struct Scratch {
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> data;
  size_t size = 0;

  std::byte* get(size_t bytes) {
    if (bytes <= size) return data.get();
    const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    data.reset(static_cast<std::byte*>(std::aligned_alloc(kHugePage, rounded)));
    if (!data) throw Error(fmt::format("flash_attention: could not allocate {} bytes to stage K/V "
                                       "(set EJK_CPU_STAGE_KV=0 to run without the copy)", rounded));
#ifdef MADV_HUGEPAGE
    madvise(data.get(), rounded, MADV_HUGEPAGE);  // advice only: failure changes nothing
#endif
    size = rounded;
    return data.get();
  }
};

// One tensor [batches, rows, H, D] (strides in elements) to [batches, H, rows, D].
void copy_head_major(const std::byte* src, std::byte* dst, int64_t batches, int64_t rows,
                     int64_t heads, int64_t d, int64_t stride_b, int64_t stride_s,
                     int64_t stride_h, size_t esize) {
  const int64_t chunks = (rows + kRowsPerItem - 1) / kRowsPerItem;
  const size_t row_bytes = size_t(d) * esize;
  ThreadPool::global().parallel_for(batches * heads * chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t bh = item / chunks, b = bh / heads, h = bh % heads;
      const int64_t r0 = item % chunks * kRowsPerItem, r1 = std::min(rows, r0 + kRowsPerItem);
      const std::byte* s = src + size_t(b * stride_b + h * stride_h) * esize;
      std::byte* o = dst + size_t(bh * rows) * row_bytes;
      for (int64_t r = r0; r < r1; ++r)
        std::memcpy(o + size_t(r) * row_bytes, s + size_t(r * stride_s) * esize, row_bytes);
    }
  });
}

int stage_setting() {  // -1 automatic, 0 off, 1 forced
  return static_cast<int>(util::env_int("EJK_CPU_STAGE_KV", 0, 1, -1));
}

}  // namespace

bool kv_staging_wanted(const FlashFwdParams& p, int64_t block_q) {
  const int setting = stage_setting();
  if (setting == 0) return false;
  const bool adjacent = p.k_stride_s == p.head_dim && p.v_stride_s == p.head_dim;
  if (adjacent) return false;  // already head-major (or one head): nothing to gain
  if (setting == 1) return true;
  const int64_t q_blocks = (p.seqlen_q + block_q - 1) / block_q;
  return q_blocks * (p.heads_q / p.heads_kv) >= 2;
}

void stage_kv_head_major(FlashFwdParams& p, DType dtype) {
  const bool varlen = p.cu_seqlens_k != nullptr;
  // Varlen rows are packed across sequences: one batch of total_k rows.
  const int64_t batches = varlen ? 1 : p.batch, rows = varlen ? p.total_k : p.seqlen_k;
  const size_t esize = dtype_size(dtype);
  const size_t tensor_bytes = size_t(batches * p.heads_kv * rows * p.head_dim) * esize;
  thread_local Scratch scratch;
  std::byte* k = scratch.get(2 * tensor_bytes);
  std::byte* v = k + tensor_bytes;
  copy_head_major(static_cast<const std::byte*>(p.k), k, batches, rows, p.heads_kv, p.head_dim,
                  p.k_stride_b, p.k_stride_s, p.k_stride_h, esize);
  copy_head_major(static_cast<const std::byte*>(p.v), v, batches, rows, p.heads_kv, p.head_dim,
                  p.v_stride_b, p.v_stride_s, p.v_stride_h, esize);
  p.k = k;
  p.v = v;
  p.k_stride_s = p.v_stride_s = p.head_dim;
  p.k_stride_h = p.v_stride_h = rows * p.head_dim;
  p.k_stride_b = p.v_stride_b = p.heads_kv * rows * p.head_dim;
}

}  // namespace ejk::detail
