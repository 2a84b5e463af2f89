// Shared by the chunked linear-recurrence emulator tests (forward and backward): 16-bit values
// to and from their bits, the error measure, varlen offsets and Mamba-2's problem and layout.
#pragma once
#include <cmath>
#include <vector>

#include "ejk/kernels/cuda/ptx.cuh"

namespace linear_chunk_emu {

using ejk::cuda::Elem;
using ejk::i32;
using ejk::u16;

template <Elem E> u16 bits(float x) { return E == Elem::bf16 ? ejk::cuda::bf16_bits(x) : ejk::cuda::f16_bits(x); }
template <Elem E> double val(u16 x) { return double(ejk::cuda::to_f32<E>(x)); }

// Relative L2 error and the largest absolute one; NaN (a value never written) fails.
struct Err {
  double num = 0, den = 0, max = 0;
  bool finite = true;
  void add(double got, double want) {
    finite = finite && std::isfinite(got);
    num += (got - want) * (got - want), den += want * want, max = std::fmax(max, std::fabs(got - want));
  }
  double rel() const { return std::sqrt(num / den); }
};

// cu: sequence starts (varlen) or empty (dense, b sequences of t).
inline std::vector<i32> offsets(const std::vector<long>& lens) {
  std::vector<i32> cu{0};
  for (long n : lens) cu.push_back(cu.back() + i32(n));
  return cu;
}

template <int N_, Elem E_> struct SsmCfg {
  static constexpr Elem E = E_;
  static constexpr int kN = N_;
};

// A Mamba-2 problem: dense b x t or varlen `lens`; dht is the backward's, in_place the forward's
// (final_state written over initial_state).
struct SsmProblem {
  long b = 1, t = 100, h = 2, g = 1, p = 64;
  std::vector<long> lens;
  bool init = true, dht = true, in_place = false;
};

// Its token layout: sequences, tokens per pack (S) and packs (dense: one per sequence).
struct SsmLayout {
  bool varlen;
  std::vector<i32> cu;
  long seqs, S, packs;
};
inline SsmLayout ssm_layout(const SsmProblem& pr) {
  SsmLayout l{!pr.lens.empty(), offsets(pr.lens), 0, 0, 0};
  l.seqs = l.varlen ? long(pr.lens.size()) : pr.b, l.S = l.varlen ? l.cu.back() : pr.t, l.packs = l.varlen ? 1 : pr.b;
  return l;
}

}  // namespace linear_chunk_emu
