// The pipelined CUDA grouped matmul (kernels/ejk/kernels/cuda/grouped_matmul_tc.cuh) run on the
// CPU through cuda_emu/'s stand-in for ptx.cuh, forward and both backward passes, against a
// float64 per-group loop over the same 16-bit inputs: the device-side slot schedule, the
// cp.async tile loads with their masks, the four ldmatrix operand layouts, the fragment
// stores. Groups of uneven sizes not aligned to the 128-row tile, an empty group, rows past the
// sizes' sum, a group offset, weights stored transposed, existing_out, f32 and bf16 outputs.
#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "ejk/kernels/cuda/grouped_matmul_tc.cuh"

namespace ejk::cuda {
alignas(16) unsigned char gmm_smem[gmm_tc_smem_bytes(true)];
}

using namespace ejk;
using namespace ejk::cuda;

namespace {

// Blocks one after another, each as kGmmTcThreads threads over shared memory poisoned first.
template <Elem E, bool kBackward> void launch(const GroupedMatmulParams& p, long blocks) {
  static_assert(kGmmTcThreads <= 8 * 32, "the stand-in has barriers for 8 warps");
  emu::use_smem(gmm_smem, sizeof(gmm_smem));
  for (long b = 0; b < blocks; ++b) emu::run_block(kGmmTcThreads, {unsigned(b)}, [&] { gmm_tc<E, kBackward>(p); });
}

struct Problem {
  long m = 300, k = 64, n = 136;
  std::vector<i32> sizes{0, 131, 7, 100};  // GS entries: an empty group, tiles cut mid-group
  long groups = 4, offset = -1;            // offset -1: group_offset not given
  bool transposed = false, existing = false, out_f32 = true;
  long shift = 0;  // out and dlhs start this many elements into their buffers (1: pairs misaligned)
};

u16 bits(Elem e, float x) { return e == Elem::bf16 ? bf16_bits(x) : f16_bits(x); }

struct Inputs {
  std::vector<u16> lhs, rhs, d_out;
  std::vector<float> existing;
  std::vector<i32> offset;
};

template <Elem E> double value(const std::vector<u16>& v, long at) { return to_f32<E>(v[size_t(at)]); }

// rel-L2 of got against want; infinite where got holds a NaN.
double rel_l2(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (got[i] - want[i]) * (got[i] - want[i]), den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

template <Elem E> void check(const Problem& pr, bool wide, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  const long m = pr.m, k = pr.k, n = pr.n, G = pr.groups, GS = long(pr.sizes.size());
  Inputs in;
  for (long i = 0; i < m * k; ++i) in.lhs.push_back(bits(E, normal(rng)));
  for (long i = 0; i < G * k * n; ++i) in.rhs.push_back(bits(E, normal(rng)));
  for (long i = 0; i < m * n; ++i) in.d_out.push_back(bits(E, normal(rng)));
  for (long i = 0; i < m * n; ++i) in.existing.push_back(normal(rng));
  in.offset = {i32(pr.offset)};

  GroupedMatmulParams p{};
  p.lhs = in.lhs.data(), p.rhs = in.rhs.data(), p.d_out = in.d_out.data();
  p.group_sizes = pr.sizes.data(), p.group_offset = pr.offset >= 0 ? in.offset.data() : nullptr;
  p.m = m, p.k = k, p.n = n, p.groups = G, p.total_groups = GS;
  p.lhs_stride = k, p.rhs_g = k * n, p.d_out_stride = n, p.dlhs_stride = k, p.out_stride = n;
  p.rhs_k = pr.transposed ? 1 : n, p.rhs_n = pr.transposed ? k : 1;  // (kk, nn) of group g
  p.drhs_g = k * n, p.drhs_k = p.rhs_k, p.drhs_n = p.rhs_n;
  p.out_f32 = pr.out_f32, p.existing_f32 = 1, p.tc_wide = wide;
  const long cols = gmm_tc_cols(wide);
  if (pr.existing) p.existing_out = in.existing.data(), p.existing_stride = n;
  auto rhs = [&](long g, long kk, long nn) { return value<E>(in.rhs, g * p.rhs_g + kk * p.rhs_k + nn * p.rhs_n); };

  // The float64 per-group loop: rows of group offset + g in [start, end), clamped to m.
  const long off = pr.offset >= 0 ? pr.offset : 0;
  std::vector<long> group_of(size_t(m), -1), start(size_t(G), 0), end(size_t(G), 0);
  long r = 0;
  for (long i = 0; i < GS; ++i) {
    const long a = std::min(r, m), e = std::min(r + long(pr.sizes[size_t(i)]), m);
    if (i >= off && i < off + G) {
      start[size_t(i - off)] = a, end[size_t(i - off)] = e;
      for (long row = a; row < e; ++row) group_of[size_t(row)] = i - off;
    }
    r += pr.sizes[size_t(i)];
  }
  std::vector<double> want(size_t(m * n)), got(size_t(m * n));
  const size_t sh = size_t(pr.shift);
  std::vector<float> out_f32(size_t(m * n) + sh, NAN);
  std::vector<u16> out16(size_t(m * n) + sh, 0x7fc0);  // NaN in bf16 and f16 alike
  for (long row = 0; row < m; ++row)
    for (long nn = 0; nn < n; ++nn) {
      double s = pr.existing ? in.existing[size_t(row * n + nn)] : 0.0;
      if (const long g = group_of[size_t(row)]; g >= 0)
        for (long kk = 0; kk < k; ++kk) s += value<E>(in.lhs, row * k + kk) * rhs(g, kk, nn);
      want[size_t(row * n + nn)] = s;
    }
  p.out = pr.out_f32 ? static_cast<void*>(out_f32.data() + sh) : static_cast<void*>(out16.data() + sh);
  p.phase = 2;
  launch<E, false>(p, gmm_row_slots(m, G, kGmmTcTile) * ceil_div(n, cols));
  for (size_t i = 0; i < got.size(); ++i)
    got[i] = pr.out_f32 ? double(out_f32[sh + i]) : double(to_f32<E>(out16[sh + i]));
  const double e_out = rel_l2(got, want);

  // Backward: dlhs = d_out rhs^T on computed rows, drhs[g] = lhs_g^T d_out_g.
  std::vector<double> want_dlhs(size_t(m * k)), want_drhs(size_t(G * k * n), 0.0);
  for (long row = 0; row < m; ++row)
    for (long kk = 0; kk < k; ++kk) {
      double s = 0;
      if (const long g = group_of[size_t(row)]; g >= 0)
        for (long nn = 0; nn < n; ++nn) s += value<E>(in.d_out, row * n + nn) * rhs(g, kk, nn);
      want_dlhs[size_t(row * k + kk)] = s;
    }
  for (long g = 0; g < G; ++g)
    for (long row = start[size_t(g)]; row < end[size_t(g)]; ++row)
      for (long kk = 0; kk < k; ++kk)
        for (long nn = 0; nn < n; ++nn)
          want_drhs[size_t(g * k * n + kk * p.drhs_k + nn * p.drhs_n)] +=
              value<E>(in.lhs, row * k + kk) * value<E>(in.d_out, row * n + nn);
  std::vector<u16> dlhs(size_t(m * k) + sh, 0x7fc0), drhs(size_t(G * k * n), 0x7fc0);
  p.dlhs = dlhs.data() + sh, p.drhs = drhs.data();
  p.phase = 2;
  launch<E, true>(p, gmm_row_slots(m, G, kGmmTcTile) * ceil_div(k, cols));
  p.phase = 3;
  launch<E, true>(p, G * ceil_div(k, (long)kGmmTcTile) * ceil_div(n, cols));
  auto widen = [](const std::vector<u16>& v) {
    std::vector<double> d;
    for (u16 x : v) d.push_back(to_f32<E>(x));
    return d;
  };
  dlhs.erase(dlhs.begin(), dlhs.begin() + long(sh));
  const double e_dlhs = rel_l2(widen(dlhs), want_dlhs), e_drhs = rel_l2(widen(drhs), want_drhs);
  std::printf("%s cols %ld m %ld k %ld n %ld G %ld/%ld offset %ld t %d ex %d out32 %d: out %.2e dlhs %.2e drhs %.2e\n",
              E == Elem::bf16 ? "bf16" : "f16", cols, m, k, n, G, GS, pr.offset, pr.transposed, pr.existing, pr.out_f32,
              e_out, e_dlhs, e_drhs);
  // 16-bit outputs round each element once (2^-8 for bf16); f32 outputs only sum in f32.
  const double tol = E == Elem::bf16 ? 1e-2 : 2e-3;
  CHECK(e_out <= (pr.out_f32 ? 1e-5 : tol));
  CHECK(e_dlhs <= tol);
  CHECK(e_drhs <= tol);
}

}  // namespace

TEST_CASE("the pipelined grouped matmul's code on emulated threads matches a float64 loop", "[grouped_matmul][tc]") {
  Problem base;  // an empty group, groups cut mid-tile, 2 column tiles of 128 (the second partial)
  check<Elem::bf16>(base, false, 1);
  Problem w = base;  // tiles of 256 columns: n and k past one, partial
  w.k = 264, w.n = 272, w.m = 150, w.sizes = {60, 0, 90};
  w.groups = 3, w.transposed = true;
  check<Elem::bf16>(w, true, 4);
  w.transposed = false, w.existing = true, w.shift = 1;
  check<Elem::bf16>(w, true, 5);
  Problem t = base;  // transposed weights, existing_out, bf16 out misaligned, rows past the sum, offset
  t.shift = 1, t.m = 200, t.k = 72, t.n = 64, t.sizes = {9, 40, 0, 77, 30, 5}, t.groups = 3, t.offset = 2;
  t.transposed = t.existing = true, t.out_f32 = false;
  check<Elem::bf16>(t, false, 2);
  Problem h = base;  // f16, more sums than the pipeline's stages, one group
  h.m = 140, h.k = 160, h.n = 8, h.sizes = {140}, h.groups = 1, h.transposed = true;
  check<Elem::f16>(h, true, 3);
}
