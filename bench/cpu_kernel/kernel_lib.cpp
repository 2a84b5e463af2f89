// The kernel's default variants behind a C function, so compare_torch.py can time the kernel
// and torch alternately in one process, on the same tensors.
#include <cstdint>

#include "ejk/kernels/cpu/flash_fwd.h"
#include "problem.h"

namespace {

using ejk::cpu::ElemKind;
using ejk::cpu::FlashFlags;
// The default blocks; -DEJK_BENCH_BLOCK_Q=.. -DEJK_BENCH_BLOCK_K=.. (EXTRA_FLAGS of build.sh)
// override them to compare block shapes against torch.
#ifndef EJK_BENCH_BLOCK_Q
#define EJK_BENCH_BLOCK_Q 128
#endif
#ifndef EJK_BENCH_BLOCK_K
#define EJK_BENCH_BLOCK_K 64
#endif
constexpr int kHeadDim = 128, kBlockQ = EJK_BENCH_BLOCK_Q, kBlockK = EJK_BENCH_BLOCK_K;

template <ElemKind K, bool kCausal>
using Config = ejk::cpu::FlashFwdConfig<K, kHeadDim, kBlockQ, kBlockK, FlashFlags{.causal = kCausal}>;

template <ElemKind K> ejk::bench::TaskFn pick(bool causal, bool& amx) {
  amx = causal ? ejk::cpu::flash_fwd_uses_amx<Config<K, true>>()
               : ejk::cpu::flash_fwd_uses_amx<Config<K, false>>();
  return causal ? &ejk::cpu::flash_fwd_tasks<Config<K, true>>
                : &ejk::cpu::flash_fwd_tasks<Config<K, false>>;
}

}  // namespace

// dtype: 0 f32, 1 bf16, 2 f16. q/k/v/out share one layout given by strides (elements) of a
// [B, S, H, D] view; lse is [B, H, S]. head_dim must be 128. Returns 1 when the AMX engine ran,
// 0 for the FMA engine, -1 for a bad argument.
extern "C" int ejk_bench_flash(int dtype, int causal, const void* q, const void* k, const void* v,
                               void* out, float* lse, int64_t batch, int64_t heads, int64_t seq,
                               int64_t head_dim, int64_t stride_b, int64_t stride_s,
                               int64_t stride_h, int threads) {
  if (head_dim != kHeadDim || dtype < 0 || dtype > 2 || threads < 1) return -1;
  ejk::FlashFwdParams p{};
  p.q = q, p.k = k, p.v = v, p.out = out, p.lse = lse;
  p.batch = batch, p.seqlen_q = p.seqlen_k = seq, p.heads_q = p.heads_kv = heads;
  p.head_dim = head_dim;
  p.q_stride_b = p.k_stride_b = p.v_stride_b = p.o_stride_b = stride_b;
  p.q_stride_s = p.k_stride_s = p.v_stride_s = p.o_stride_s = stride_s;
  p.q_stride_h = p.k_stride_h = p.v_stride_h = p.o_stride_h = stride_h;
  p.lse_stride_b = heads * seq, p.lse_stride_h = seq;
  p.scale = 1.0f / __builtin_sqrtf(float(head_dim));
  p.mask.causal = causal != 0;
  p.normalize_output = 1;
  bool amx = false;
  ejk::bench::TaskFn fn = dtype == 0   ? pick<ElemKind::f32>(causal, amx)
                          : dtype == 1 ? pick<ElemKind::bf16>(causal, amx)
                                       : pick<ElemKind::f16>(causal, amx);
  ejk::bench::run_threaded(fn, p, kBlockQ, threads);
  return amx ? 1 : 0;
}
