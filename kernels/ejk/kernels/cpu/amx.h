// Intel AMX (tile registers + bf16 tile dot products) for the bf16 engine, spelled as inline
// assembly: the intrinsics headers are not freestanding-friendly and differ between GCC and
// Clang, while the assembler of both knows every AMX instruction.
//
// Available when the compile targets AMX-BF16 (e.g. -march=sapphirerapids, or the JIT's host
// features on such a CPU) on Linux; EJK_CPU_NO_AMX turns it off. At run time Linux must grant
// the process the tile state (request_permission), else the engine is not used.
#pragma once
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/cpu/vec.h"

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__) && \
    defined(__AVX512BW__) && defined(__linux__) && defined(__x86_64__) && !defined(EJK_CPU_NO_AMX)
#define EJK_CPU_AMX 1
#else
#define EJK_CPU_AMX 0
#endif

#if EJK_CPU_AMX
namespace ejk::cpu::amx {

// Every tile is used as 16 rows of 64 bytes: 16 x 16 float32 or 16 x 32 bf16.
inline constexpr int kTileRows = 16;
inline constexpr int kTileBytes = 64;

// arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): Linux enables the (large) tile state
// per process on request; the first tile instruction without it raises SIGILL. Repeating the
// request is harmless and costs one system call, so every kernel call makes it.
EJK_HD bool request_permission() {
  constexpr long kSysArchPrctl = 158, kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  long ret;
  asm volatile("syscall"
               : "=a"(ret)
               : "a"(kSysArchPrctl), "D"(kArchReqXcompPerm), "S"(kXfeatureXtiledata)
               : "rcx", "r11", "memory");
  return ret == 0;
}

// The 64-byte operand of ldtilecfg (palette 1).
struct alignas(64) TileConfig {
  unsigned char palette;
  unsigned char start_row;
  unsigned char reserved[14];
  u16 colsb[16];
  unsigned char rows[16];
};

// All 8 tiles as 16 rows x 64 bytes.
EJK_HD void configure() {
  TileConfig cfg{};
  cfg.palette = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = kTileBytes;
    cfg.rows[t] = kTileRows;
  }
  asm volatile("ldtilecfg %0" : : "m"(cfg));
}

// Returns the tile state to its initial (cheap to context-switch) state.
EJK_HD void release() { asm volatile("tilerelease" ::: "memory"); }

template <int T> EJK_HD void zero() { asm volatile("tilezero %%tmm%c0" : : "i"(T)); }

// Tile T <- 16 rows of 64 bytes, rows stride_bytes apart.
template <int T> EJK_HD void load(const void* p, i64 stride_bytes) {
  asm volatile("tileloadd (%0,%1,1), %%tmm%c2" : : "r"(p), "r"(stride_bytes), "i"(T) : "memory");
}

template <int T> EJK_HD void store(void* p, i64 stride_bytes) {
  asm volatile("tilestored %%tmm%c2, (%0,%1,1)" : : "r"(p), "r"(stride_bytes), "i"(T) : "memory");
}

// C (16 x 16 float32) += A (16 x 32 bf16) . B (16 pairs x 16 columns x 2 bf16, "VNNI" layout:
// row p holds rows 2p and 2p+1 of the right operand, interleaved).
template <int C, int A, int B> EJK_HD void dot_bf16() {
  asm volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" : : "i"(C), "i"(A), "i"(B));
}

// ---- 512-bit helpers for the layouts the tiles need ----

typedef unsigned v16u __attribute__((vector_size(64)));
typedef unsigned short v32u16 __attribute__((vector_size(64)));
typedef unsigned short v16u16 __attribute__((vector_size(32)));

// Lane i of the result holds (bf16(lo[i]), bf16(hi[i])) as one 32-bit pair, rounded to
// nearest even: two rows of an operand interleaved as VNNI wants them.
EJK_HD v16u bf16_pairs(vf lo, vf hi) {
  v32u16 halves;  // words 0..15: lo, words 16..31: hi
  asm("vcvtne2ps2bf16 %2, %1, %0" : "=v"(halves) : "v"(hi), "v"(lo));
  v32u16 pairs = __builtin_shufflevector(halves, halves, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5,
                                         21, 6, 22, 7, 23, 8, 24, 9, 25, 10, 26, 11, 27, 12,
                                         28, 13, 29, 14, 30, 15, 31);
  return __builtin_bit_cast(v16u, pairs);
}

// 16 bf16 of row a and 16 of row b interleaved: (a0, b0, a1, b1, ...).
EJK_HD v32u16 interleave_bf16(v16u16 a, v16u16 b) {
  return __builtin_shufflevector(a, b, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23, 8,
                                 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
}

template <int... L> struct Lanes {};
using Lanes16 = Lanes<0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15>;

// One butterfly stage of a 16 x 16 transpose: swaps the off-diagonal S x S blocks of every
// 2S x 2S block of rows (a = row i, b = row i + S).
template <int S, int... L> EJK_HD v16u swap_low(v16u a, v16u b, Lanes<L...>) {
  return __builtin_shufflevector(a, b, ((L & S) ? 16 + L - S : L)...);
}
template <int S, int... L> EJK_HD v16u swap_high(v16u a, v16u b, Lanes<L...>) {
  return __builtin_shufflevector(a, b, ((L & S) ? 16 + L : L + S)...);
}
template <int S> EJK_HD void transpose_stage(v16u* r) {
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) {
    if (i & S) continue;
    const v16u lo = swap_low<S>(r[i], r[i + S], Lanes16{});
    const v16u hi = swap_high<S>(r[i], r[i + S], Lanes16{});
    r[i] = lo;
    r[i + S] = hi;
  }
}

// r[i][j] <- r[j][i] for a 16 x 16 block of 32-bit values.
EJK_HD void transpose16(v16u* r) {
  transpose_stage<8>(r);
  transpose_stage<4>(r);
  transpose_stage<2>(r);
  transpose_stage<1>(r);
}

}  // namespace ejk::cpu::amx
#endif  // EJK_CPU_AMX
