// Philox 4x32-10 (Salmon et al., SC 2011; Random123's constants) and the dropout keep decision
// of attention, defined once for every backend and the float64 reference.
//
// Keep decision of (batch b, query head h, query row i, key column j), positions relative to
// the sequence start (varlen: b is the packed sequence's index, i and j positions within it):
//   key     = (seed mod 2^32, seed >> 32)
//   counter = (j / 4, i, h, b)                   each truncated to 32 bits
//   word    = philox4x32_10(counter, key)[j % 4]
//   keep   <=> word >= threshold,  threshold = floor(p * 2^32)   (p the f32 dropout_prob)
// A kept weight is multiplied by scale = f32(1 / (1 - p)) (p in double). Nothing else enters:
// not block sizes, tiling, backend, thread or run. Freestanding: g++, clang, nvcc and NVRTC.
#pragma once
#include "ejk/kernels/common/base.h"

namespace ejk {

struct Philox4 {
  u32 w[4];
};

EJK_HD void philox_mulhilo(u32 a, u32 b, u32& hi, u32& lo) {
  const u64 prod = (u64)a * (u64)b;
  hi = (u32)(prod >> 32);
  lo = (u32)prod;
}

// Ten rounds with the key bumped between them (Random123's philox4x32_R with R = 10).
EJK_HD Philox4 philox4x32_10(u32 c0, u32 c1, u32 c2, u32 c3, u32 k0, u32 k1) {
  constexpr u32 kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // multipliers
  constexpr u32 kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // Weyl key increments
  for (int r = 0; r < 10; ++r) {
    u32 hi0, lo0, hi1, lo1;
    philox_mulhilo(kM0, c0, hi0, lo0);
    philox_mulhilo(kM1, c2, hi1, lo1);
    const u32 n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
    k0 += kW0, k1 += kW1;
  }
  return {{c0, c1, c2, c3}};
}

// What a dropout kernel gets: seed, the integer threshold and the scale of kept weights.
struct DropoutParams {
  u64 seed;
  u32 threshold;  // floor(p * 2^32); 0 keeps everything
  float scale;    // f32(1 / (1 - p))
};

// A variant's params followed by the dropout's: the base keeps the size and layout that the
// other variants' binaries take; a dropout key's entry point takes DropoutArgs<Base, true>.
template <class Base> struct WithDropout : Base {
  DropoutParams dropout;
};
template <class Base, bool kDropout> struct DropoutArgsOf {
  using type = Base;
};
template <class Base> struct DropoutArgsOf<Base, true> {
  using type = WithDropout<Base>;
};
template <class Base, bool kDropout> using DropoutArgs = typename DropoutArgsOf<Base, kDropout>::type;

// The four words of keys [4 * (j / 4), 4 * (j / 4) + 4) of row (b, h, i): a kernel that walks
// keys in order draws one block per four keys.
EJK_HD Philox4 dropout_words(const DropoutParams& d, i64 b, i64 h, i64 i, i64 j) {
  return philox4x32_10((u32)(j >> 2), (u32)i, (u32)h, (u32)b, (u32)d.seed, (u32)(d.seed >> 32));
}

EJK_HD bool dropout_keep_word(const DropoutParams& d, u32 word) { return word >= d.threshold; }

// The keep decision of one (b, h, i, j).
EJK_HD bool dropout_keep(const DropoutParams& d, i64 b, i64 h, i64 i, i64 j) {
  return dropout_keep_word(d, dropout_words(d, b, h, i, j).w[j & 3]);
}

// The multiplier of weight (b, h, i, j): scale when kept, else 0.
EJK_HD float dropout_factor(const DropoutParams& d, i64 b, i64 h, i64 i, i64 j) {
  return dropout_keep(d, b, h, i, j) ? d.scale : 0.0f;
}

}  // namespace ejk
