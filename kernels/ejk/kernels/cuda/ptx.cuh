// Thin inline-PTX wrappers for the sm_80 tensor-core path: 16-bit element conversion,
// cp.async, ldmatrix and mma.sync m16n8k16. Inline PTX instead of cuda_bf16.h / cuda_pipeline.h
// / CuTe keeps NVRTC's cold compile short (no heavy headers to parse) and makes every memory
// and matrix instruction visible at its call site.
#pragma once
#include "ejk/kernels/common/base.h"

namespace ejk::cuda {

// Element types of a variant. The tensor-core kernels take the 16-bit ones, as raw bits, and
// convert pairs to/from fp32 with the cvt instructions below; f32 exists so that an f32 key
// fails with a readable static_assert instead of an unknown name.
enum class Elem { f32, bf16, f16 };

template <Elem E> __device__ __forceinline__ float to_f32(u16 bits);
template <> __device__ __forceinline__ float to_f32<Elem::bf16>(u16 bits) {
  return __uint_as_float(static_cast<u32>(bits) << 16);  // bf16 is the top half of an fp32
}
template <> __device__ __forceinline__ float to_f32<Elem::f16>(u16 bits) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
  return f;
}

// Packs (lo, hi) into one 32-bit register, lo in the low half, rounding to nearest even.
template <Elem E> __device__ __forceinline__ u32 pack2(float lo, float hi);
template <> __device__ __forceinline__ u32 pack2<Elem::bf16>(float lo, float hi) {
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
template <> __device__ __forceinline__ u32 pack2<Elem::f16>(float lo, float hi) {
  u32 r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

__device__ __forceinline__ u32 smem_addr(const void* p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copies that bypass L1: all of the chunk or (valid false: rows past
// the sequence end) nothing, zero-filled, so no garbage (possibly NaN) enters the matrix products.
__device__ __forceinline__ void cp_async_16(u32 dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N committed groups are still in flight.
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Four 8x8 16-bit matrices; lane L supplies the row address of matrix L / 8.
__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// Same, each matrix transposed on the way (row-major V read as the col-major B operand).
__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// D = A * B + D for one 16x8x16 tile: A row-major (4 regs), B col-major (2 regs), fp32 D.
template <Elem E>
__device__ __forceinline__ void mma_16816(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1);
template <>
__device__ __forceinline__ void mma_16816<Elem::bf16>(float (&d)[4], const u32 (&a)[4], u32 b0,
                                                      u32 b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_16816<Elem::f16>(float (&d)[4], const u32 (&a)[4], u32 b0,
                                                     u32 b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// Reciprocal to ~1 ulp: the epilogue's 1 / row sum (an IEEE division is a call with a slow path).
__device__ __forceinline__ float fast_rcp(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float fast_log2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// Hardware tanh (sm_75+): max relative error ~2^-11, well inside the bf16/fp16 tolerance.
__device__ __forceinline__ float fast_tanh(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// --- sm_90a: warpgroup matrix multiply (wgmma) support -------------------------------------

// Shared-memory matrix descriptor for a 128-byte-swizzled tile (the layout every sm90 operand
// uses here: rows of 64 16-bit elements = 128 B, 16-byte chunks XOR-ed with row % 8, 1024-byte
// aligned 8-row atoms). lbo/sbo in bytes: leading/stride byte offsets as the PTX ISA defines
// them for the operand's major-ness.
__device__ __forceinline__ u64 smem_desc_sw128(u32 addr, u32 lbo_bytes, u32 sbo_bytes) {
  u64 d = (addr & 0x3FFFFu) >> 4;
  d |= u64((lbo_bytes >> 4) & 0x3FFFu) << 16;
  d |= u64((sbo_bytes >> 4) & 0x3FFFu) << 32;
  d |= u64(1) << 62;  // swizzle mode: 128 B
  return d;
}
// The descriptor of addr + bytes from addr's: the address field is linear (addr >> 4 in the
// low 14 bits) and shared memory ends below 2^18 B, so the add never carries out of it. One
// add per wgmma instead of rebuilding the descriptor.
__device__ __forceinline__ u64 smem_desc_advance(u64 desc, u32 bytes) { return desc + (bytes >> 4); }
// Orders this thread's earlier register writes before the next wgmma reads them.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// --- sm_90a: warp specialization support -----------------------------------------------------

// mbarrier (shared-memory transaction barrier) at shared address `bar`. A phase completes when
// `count` arrivals have happened; waiters name the phase by its parity (0 for the first).
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Spins until the phase of parity `parity` has completed (acquire: writes made visible by the
// arrivals are visible after it).
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "mbar_wait_loop:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra mbar_wait_loop;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// One arrival that also raises the phase's expected transaction count by `bytes`: the phase
// completes once the arrivals are in and that many bytes of bulk copies have landed.
__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// Asks L2 for the cache line holding `ptr` (no register result, no wait): a load issued a tile
// ahead of its use then finds the line in L2 instead of DRAM.
__device__ __forceinline__ void prefetch_l2(const void* ptr) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(ptr));
}

// --- sm_90: the tensor memory accelerator (TMA) ----------------------------------------------

// Fetches the tensor map (a __grid_constant__ kernel argument) ahead of its first use.
__device__ __forceinline__ void tma_prefetch_map(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}
// Copies the box at element coordinates (c0..c3) of a 4-D tensor map into shared memory at
// `dst` (1024-byte aligned for the 128-byte swizzle), counting its bytes on mbarrier `bar`.
// Elements outside the tensor arrive as zeros (and still count).
__device__ __forceinline__ void tma_load_4d(u32 dst, const void* map, u32 bar, int c0, int c1,
                                            int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

// An L2 policy for data read once (a bias): evicted first, so that the K/V tiles other blocks
// still read stay in L2 (d64 192 x 128 causal 16k with a bias: 0.88-0.97x without it, 1.08x
// with it; docs/design/flash_fwd_cuda.md, "Bias").
__device__ __forceinline__ u64 l2_evict_first_policy() {
  u64 policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
// tma_load_4d with an L2 cache policy (l2_evict_first_policy).
__device__ __forceinline__ void tma_load_4d_hint(u32 dst, const void* map, u32 bar, int c0, int c1,
                                                 int c2, int c3, u64 policy) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3, %4, %5}], [%6], %7;\n" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar), "l"(policy)
      : "memory");
}

// Copies a box of shared memory (`src`, laid out as tma_load_4d writes it) to the 4-D tensor
// map's element coordinates (c0..c3); elements outside the tensor are not written. Completion is
// tracked per thread in bulk groups (bulk_commit / bulk_wait_read / bulk_wait).
__device__ __forceinline__ void tma_store_4d(const void* map, u32 src, int c0, int c1, int c2,
                                             int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3, %4}], [%5];\n" ::"l"(map),
      "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(src)
      : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// At most N of this thread's bulk groups still read their shared-memory source.
template <int N> __device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
// Orders this thread's generic-proxy shared-memory writes before later async-proxy (TMA)
// reads of them; the reading thread must also be ordered after the writers (a barrier).
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Makes mbarrier initialisation visible to the async proxy (TMA completes transactions on
// the barriers), before the block-wide barrier that publishes them to the other threads.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// Named barriers (ids 1..15; 0 is __syncthreads): `count` threads, a multiple of 32, of which
// some may only arrive (producer side) while the others sync (wait).
__device__ __forceinline__ void named_bar_sync(u32 id, u32 count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(u32 id, u32 count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// Moves registers between warpgroups of a block (the kernel needs a register cap at entry:
// __launch_bounds__(threads, 1)); every warp of the warpgroup executes it.
template <int N> __device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

// Reductions across the 4 lanes of a quad, which hold the same rows of an mma C fragment.
// max.f32 (one FMNMX): max_of's `a < b ? b : a` compiles to a compare and a select. The
// softmax's maxima see no NaN (scores are finite or -inf).
__device__ __forceinline__ float fmax_f32(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ float quad_max(float v) {
  v = fmax_f32(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmax_f32(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

}  // namespace ejk::cuda
