// A host stand-in for kernels/ejk/kernels/cuda/ptx.cuh, found first on the include path of the
// emulator tests (test_*_emu.cpp), so that CUDA kernels' own code runs on the CPU: one
// std::thread per CUDA thread, __syncthreads a block barrier, and ldmatrix, mma.sync m16n8k16 and
// shuffles as warp collectives (each lane posts its operands, a warp barrier, each lane computes
// its own fragment by the PTX ISA's layouts), block votes over a shared word. Only what delta.cuh,
// delta_chunk.cuh, linear_chunk.cuh, flash_mask_tiles.cuh, the flash forward's tile pieces
// (flash_fwd_tile.cuh), grouped_matmul_tc.cuh, nsa_fwd.cuh, nsa_bwd.cuh and page_decode_tc.cuh use.
#pragma once
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>
#include "ejk/kernels/common/base.h"
#define __device__
#define __forceinline__ inline
#define __shared__
#define __align__(n) __attribute__((aligned(n)))
#define __global__
#define __launch_bounds__(n)
#define __grid_constant__
struct Dim3 { unsigned x, y = 0, z = 0; };
inline thread_local Dim3 threadIdx, blockIdx;
inline Dim3 gridDim{1, 1, 1};  // set by a test before its threads start
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
struct alignas(8) float2 { float x, y; };
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __uint_as_float(unsigned x) { float f; std::memcpy(&f, &x, 4); return f; }
namespace emu {
inline unsigned char* smem_base;  // the kernel's shared memory (a test's buffer), or none
inline size_t smem_bytes;
inline std::barrier<>* block_bar;
inline std::barrier<>* warp_bar[8];
inline unsigned slots[8][32][8];
}  // namespace emu
inline void __syncthreads() { emu::block_bar->arrive_and_wait(); }
namespace emu {
inline std::atomic<int> vote_any{0}, vote_none{0};  // a vote's word (one block at a time)
// The block's vote: every thread posts, then reads, then thread 0 clears for the next vote (the
// first barrier of which it reaches only after clearing).
inline int block_vote(bool v, bool all) {
  block_bar->arrive_and_wait();
  if (v) vote_any.fetch_or(1);
  else vote_none.fetch_or(1);
  block_bar->arrive_and_wait();
  const int r = all ? !vote_none.load() : vote_any.load();
  block_bar->arrive_and_wait();
  if (threadIdx.x == 0) vote_any.store(0), vote_none.store(0);
  return r;
}
}  // namespace emu
inline int __syncthreads_or(int v) { return emu::block_vote(v != 0, false); }
inline int __syncthreads_and(int v) { return emu::block_vote(v != 0, true); }
template <class T> inline T __shfl_xor_sync(unsigned, T x, int o) {
  static_assert(sizeof(T) <= 8, "a lane's slot holds 8 bytes here");
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  std::memcpy(&emu::slots[w][l][0], &x, sizeof(T));
  emu::warp_bar[w]->arrive_and_wait();
  T y;
  std::memcpy(&y, &emu::slots[w][l ^ o][0], sizeof(T));
  emu::warp_bar[w]->arrive_and_wait();
  return y;
}
inline int __all_sync(unsigned, int pred) {
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  emu::slots[w][l][6] = pred != 0;
  emu::warp_bar[w]->arrive_and_wait();
  int all = 1;
  for (int i = 0; i < 32; ++i) all &= int(emu::slots[w][i][6]);
  emu::warp_bar[w]->arrive_and_wait();
  return all;
}
inline unsigned __ballot_sync(unsigned, int pred) {
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  emu::slots[w][l][6] = pred != 0;
  emu::warp_bar[w]->arrive_and_wait();
  unsigned mask = 0;
  for (int i = 0; i < 32; ++i) mask |= unsigned(emu::slots[w][i][6] != 0) << i;
  emu::warp_bar[w]->arrive_and_wait();
  return mask;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline float __shfl_up_sync(unsigned, float x, int o) {
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  std::memcpy(&emu::slots[w][l][0], &x, 4);
  emu::warp_bar[w]->arrive_and_wait();
  float y = x;  // lanes below o keep their own value, as the hardware does
  if (l >= o) std::memcpy(&y, &emu::slots[w][l - o][0], 4);
  emu::warp_bar[w]->arrive_and_wait();
  return y;
}
namespace ejk::cuda {
enum class Elem { f32, bf16, f16 };
inline float fast_exp2(float x) { return std::exp2(x); }
inline float fast_rcp(float x) { return 1.0f / x; }
inline float fast_log2(float x) { return std::log2(x); }
inline float fast_tanh(float x) { return std::tanh(x); }
inline float fmax_f32(float a, float b) { return std::fmax(a, b); }
inline float quad_max(float v) {
  v = fmax_f32(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmax_f32(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
inline float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
template <Elem E> inline float to_f32(u16 bits);
template <> inline float to_f32<Elem::bf16>(u16 bits) { return __uint_as_float(unsigned(bits) << 16); }
template <> inline float to_f32<Elem::f16>(u16 bits) { _Float16 h; std::memcpy(&h, &bits, 2); return float(h); }
inline u16 bf16_bits(float x) {
  unsigned u; std::memcpy(&u, &x, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return u16(u >> 16);
}
inline u16 f16_bits(float x) { _Float16 h = _Float16(x); u16 b; std::memcpy(&b, &h, 2); return b; }
template <Elem E> inline u32 pack2(float lo, float hi);
template <> inline u32 pack2<Elem::bf16>(float lo, float hi) { return bf16_bits(lo) | (u32(bf16_bits(hi)) << 16); }
template <> inline u32 pack2<Elem::f16>(float lo, float hi) { return f16_bits(lo) | (u32(f16_bits(hi)) << 16); }
inline u32 smem_addr(const void* p) { return u32(static_cast<const unsigned char*>(p) - emu::smem_base); }
inline void cp_async_16(u32 dst, const void* src, bool valid) {
  if (valid) std::memcpy(emu::smem_base + dst, src, 16);
  else std::memset(emu::smem_base + dst, 0, 16);
}
inline void cp_async_commit() {}
template <int N> inline void cp_async_wait() {}
inline u16 smem_u16(u32 addr) { u16 v; std::memcpy(&v, emu::smem_base + addr, 2); return v; }
inline void ldmatrix_any(u32 (&r)[4], u32 addr, bool trans) {
  const int w = threadIdx.x / 32, t = threadIdx.x % 32;
  emu::slots[w][t][7] = addr;
  emu::warp_bar[w]->arrive_and_wait();
  for (int i = 0; i < 4; ++i) {
    u16 lo, hi;
    if (!trans) {
      const u32 row = emu::slots[w][8 * i + t / 4][7];
      lo = smem_u16(row + 2 * (2 * (t % 4))), hi = smem_u16(row + 2 * (2 * (t % 4) + 1));
    } else {
      lo = smem_u16(emu::slots[w][8 * i + 2 * (t % 4)][7] + 2 * (t / 4));
      hi = smem_u16(emu::slots[w][8 * i + 2 * (t % 4) + 1][7] + 2 * (t / 4));
    }
    r[i] = lo | (u32(hi) << 16);
  }
  emu::warp_bar[w]->arrive_and_wait();
}
inline void ldmatrix_x4(u32 (&r)[4], u32 addr) { ldmatrix_any(r, addr, false); }
inline void ldmatrix_x4_trans(u32 (&r)[4], u32 addr) { ldmatrix_any(r, addr, true); }
template <Elem E> inline void mma_16816(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  for (int i = 0; i < 4; ++i) emu::slots[w][l][i] = a[i];
  emu::slots[w][l][4] = b0, emu::slots[w][l][5] = b1;
  emu::warp_bar[w]->arrive_and_wait();
  float A[16][16], B[16][8];
  for (int L = 0; L < 32; ++L) {
    const int g = L / 4, c = 2 * (L % 4);
    auto h = [&](u32 v, int half) { return to_f32<E>(u16(half ? v >> 16 : v & 0xffff)); };
    const unsigned* s = emu::slots[w][L];
    for (int e = 0; e < 2; ++e) {
      A[g][c + e] = h(s[0], e), A[g + 8][c + e] = h(s[1], e);
      A[g][c + 8 + e] = h(s[2], e), A[g + 8][c + 8 + e] = h(s[3], e);
      B[c + e][g] = h(s[4], e), B[c + 8 + e][g] = h(s[5], e);
    }
  }
  emu::warp_bar[w]->arrive_and_wait();
  const int g = l / 4, c = 2 * (l % 4);
  for (int e = 0; e < 4; ++e) {
    const int m = g + (e >= 2) * 8, n = c + (e & 1);
    float acc = 0;
    for (int k = 0; k < 16; ++k) acc += A[m][k] * B[k][n];
    d[e] += acc;
  }
}
}  // namespace ejk::cuda

namespace emu {
// The test's buffer as the kernels' shared memory.
inline void use_smem(void* base, size_t bytes) { smem_base = static_cast<unsigned char*>(base), smem_bytes = bytes; }

// Block `at` of a launch as `threads` std::threads (a barrier per warp of 32), its shared memory
// poisoned first; each thread sets threadIdx and blockIdx, then runs body().
template <class Body> void run_block(unsigned threads, Dim3 at, const Body& body) {
  std::barrier<> block(threads);
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  for (unsigned w = 0; w < (threads + 31) / 32; ++w) {
    warps.push_back(std::make_unique<std::barrier<>>(std::min(32u, threads - 32 * w)));
    warp_bar[w] = warps.back().get();
  }
  block_bar = &block;
  if (smem_base != nullptr) std::memset(smem_base, 0x7f, smem_bytes);
  std::vector<std::thread> team;
  for (unsigned t = 0; t < threads; ++t)
    team.emplace_back([&, t] {
      threadIdx.x = t, blockIdx = at;
      body();
    });
  for (auto& t : team) t.join();
}
}  // namespace emu
