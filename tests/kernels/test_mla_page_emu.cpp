// The CUDA tensor-core multi-head latent attention (kernels/ejk/kernels/cuda/mla_page.cuh) run
// on the CPU through cuda_emu/'s stand-in for ptx.cuh, against a float64 softmax on the same
// 16-bit inputs: the block's heads and span, the cp.async stages (and the element-wise loads of
// unaligned rows), the split-k partial scores, the fragment layouts, the online softmax every
// warp runs alike and the column split of the output. Batches of decode tokens, a prefill
// chunk, an empty query range and a token past every sequence; 8, 20 and 128 query heads;
// pages of 2, 6 and 16 shuffled; R = 512, E = 64 and R = 128, E = 32; softcap, window,
// v_scale; NaN in the cache rows' padding and in this call's slots (read from the keys).
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "ejk/kernels/cuda/mla_page.cuh"

namespace ejk::cuda {
alignas(16) unsigned char mla_smem[160 * 1024];
}

using namespace ejk;
using namespace ejk::cuda;

namespace {

template <int R_, int E_, Elem El> struct Cfg {
  static constexpr Elem E = El;
  static constexpr int kR = R_, kE = E_;
};

struct Problem {
  std::vector<long> q_lens{1, 1, 7, 0, 1}, kv_lens{1, 40, 23, 5, 75};
  long hq = 20, ps = 6, extra_tokens = 1;
  float softcap = 0, v_scale = 1;
  long window = 0;
  bool vec = true;
};

template <Elem E> u16 bits(float x) { return E == Elem::bf16 ? bf16_bits(x) : f16_bits(x); }
template <Elem E> double value(u16 b) { return double(to_f32<E>(b)); }
constexpr u16 kNan = 0x7fff;  // a NaN in bf16 and in f16

template <int R, int E, Elem El> double run_problem(const Problem& pr, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  const long S = long(pr.q_lens.size()), kd = mla_align128(R) + mla_align128(E), pe_off = mla_align128(R);
  long T = pr.extra_tokens, longest = 1;
  for (long s = 0; s < S; ++s) T += pr.q_lens[size_t(s)], longest = std::max(longest, pr.kv_lens[size_t(s)]);
  const long mb = (longest + pr.ps - 1) / pr.ps, pages = S * mb + 2;
  // Queries and keys one element past their rows where unaligned (odd pitches: no 16-byte chunks).
  const long qpad = pr.vec ? 0 : 1;
  auto randn = [&](size_t n) {
    std::vector<u16> v(n);
    for (auto& x : v) x = bits<El>(nd(rng));
    return v;
  };
  std::vector<u16> qn = randn(size_t(T * pr.hq * R)), qp = randn(size_t(T * pr.hq * E));
  std::vector<u16> kc = randn(size_t(T * (R + qpad))), kp = randn(size_t(T * (E + qpad)));
  std::vector<u16> cache = randn(size_t(pages * pr.ps * kd));
  for (long r = 0; r < pages * pr.ps; ++r) {
    for (long d = R; d < pe_off; ++d) cache[size_t(r * kd + d)] = kNan;
    for (long d = pe_off + E; d < kd; ++d) cache[size_t(r * kd + d)] = kNan;
  }
  std::vector<i32> perm(static_cast<size_t>(pages)), tables(static_cast<size_t>(S * mb));
  std::vector<i32> lens(static_cast<size_t>(S)), qs(static_cast<size_t>(S + 1));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (size_t i = 0; i < tables.size(); ++i) tables[i] = perm[i];
  qs[0] = 0;
  for (long s = 0; s < S; ++s) {
    lens[size_t(s)] = i32(pr.kv_lens[size_t(s)]), qs[size_t(s + 1)] = qs[size_t(s)] + i32(pr.q_lens[size_t(s)]);
    for (long j = pr.kv_lens[size_t(s)] - pr.q_lens[size_t(s)]; j < pr.kv_lens[size_t(s)]; ++j)
      for (long d = 0; d < kd; ++d) cache[size_t((tables[size_t(s * mb + j / pr.ps)] * pr.ps + j % pr.ps) * kd + d)] = kNan;
  }
  const i32 dist[3] = {0, 0, i32(S)};
  std::vector<u16> out(size_t(T * pr.hq * R), kNan);

  MlaPageParams p{};
  p.q_nope = qn.data(), p.q_pe = qp.data(), p.new_c = kc.data(), p.new_pe = kp.data(), p.cache = cache.data();
  p.kv_lens = lens.data(), p.block_tables = tables.data(), p.query_start = qs.data(), p.distribution = dist;
  p.out = out.data();
  p.tokens = T, p.seqs = S, p.q_heads = pr.hq, p.latent = R, p.rope = E, p.num_pages = pages, p.page_size = pr.ps;
  p.pack = 2, p.max_pages = mb, p.pe_offset = pe_off;
  p.qn_st = pr.hq * R, p.qn_sh = R, p.qp_st = pr.hq * E, p.qp_sh = E, p.nc_st = R + qpad, p.np_st = E + qpad;
  p.o_st = pr.hq * R, p.o_sh = R;
  p.c_sp = pr.ps * kd, p.c_sq = 2 * kd, p.c_sk = kd, p.bt_s = 1;
  p.scale = float(1.0 / std::sqrt(double(R + E))), p.softcap = pr.softcap, p.v_scale = pr.v_scale;
  p.window = pr.window, p.vec = pr.vec ? 1 : 0;

  REQUIRE(size_t(mla_cuda_smem_bytes(R, E)) <= sizeof(mla_smem));
  emu::use_smem(mla_smem, sizeof(mla_smem));
  const unsigned head_blocks = unsigned((pr.hq + kMlaRows - 1) / kMlaRows);
  for (long t = 0; t < T; ++t)
    for (unsigned y = 0; y < head_blocks; ++y)
      emu::run_block(kMlaThreads, {unsigned(t), y}, [&] { mla_page_attention<Cfg<R, E, El>>(p); });

  // float64: each query's visible positions, [c, k_pe] from the cache or this call's keys.
  double num = 0, den = 0;
  long tok = 0;
  auto compare = [&](long t, long h, const std::vector<double>& want) {
    for (long d = 0; d < R; ++d) {
      const double got = value<El>(out[size_t((t * pr.hq + h) * R + d)]);
      if (!std::isfinite(got)) return (void)(num = INFINITY);
      num += (got - want[size_t(d)]) * (got - want[size_t(d)]), den += want[size_t(d)] * want[size_t(d)];
    }
  };
  for (long s = 0; s < S; ++s) {
    const long n_q = pr.q_lens[size_t(s)], n_kv = pr.kv_lens[size_t(s)], ctx = n_kv - n_q, first = tok;
    auto kv = [&](long j, long d) {  // d < R: c, else k_pe[d - R]
      if (j >= ctx) return d < R ? value<El>(kc[size_t((first + j - ctx) * (R + qpad) + d)])
                                 : value<El>(kp[size_t((first + j - ctx) * (E + qpad) + d - R)]);
      const long row = tables[size_t(s * mb + j / pr.ps)] * pr.ps + j % pr.ps;
      return value<El>(cache[size_t(row * kd + (d < R ? d : pe_off + d - R))]);
    };
    for (long i = 0; i < n_q; ++i, ++tok) {
      const long pos = ctx + i, lo = pr.window > 0 ? std::max(0L, pos - pr.window + 1) : 0;
      for (long h = 0; h < pr.hq; ++h) {
        std::vector<double> w, y(static_cast<size_t>(R), 0.0);
        double mx = -INFINITY;
        for (long j = lo; j <= pos; ++j) {
          double x = 0;
          for (long d = 0; d < R; ++d) x += value<El>(qn[size_t((tok * pr.hq + h) * R + d)]) * kv(j, d);
          for (long d = 0; d < E; ++d) x += value<El>(qp[size_t((tok * pr.hq + h) * E + d)]) * kv(j, R + d);
          x *= double(p.scale);
          if (pr.softcap > 0) x = double(pr.softcap) * std::tanh(x / double(pr.softcap));
          w.push_back(x), mx = std::max(mx, x);
        }
        double sum = 0;
        for (double& x : w) sum += (x = std::exp(x - mx));
        for (long j = lo; j <= pos; ++j)
          for (long d = 0; d < R; ++d) y[size_t(d)] += double(pr.v_scale) * w[size_t(j - lo)] / sum * kv(j, d);
        compare(tok, h, y);
      }
    }
  }
  for (long t = tok; t < T; ++t)  // tokens of no sequence: 0
    for (long h = 0; h < pr.hq; ++h) compare(t, h, std::vector<double>(size_t(R), 0.0));
  const double rel = std::sqrt(num / std::max(den, 1e-300));
  UNSCOPED_INFO("R " << R << " E " << E << " hq " << pr.hq << " ps " << pr.ps << " vec " << pr.vec << ": rel_l2 " << rel);
  return rel;
}

}  // namespace

TEST_CASE("CUDA MLA (emulated): DeepSeek dims, bf16 and f16", "[mla_page][emu]") {
  Problem p;
  CHECK(run_problem<512, 64, Elem::bf16>(p, 1) <= 1e-2);
  p.hq = 8, p.ps = 16, p.softcap = 12, p.v_scale = 0.5f;
  CHECK(run_problem<512, 64, Elem::f16>(p, 2) <= 1e-2);
}

TEST_CASE("CUDA MLA (emulated): 128 heads, a window, unaligned rows", "[mla_page][emu]") {
  Problem p;
  p.q_lens = {1, 3}, p.kv_lens = {33, 50}, p.hq = 128, p.ps = 2, p.window = 9, p.extra_tokens = 0;
  CHECK(run_problem<128, 32, Elem::bf16>(p, 3) <= 1e-2);
  Problem q;
  q.vec = false, q.window = 17, q.softcap = 7;
  CHECK(run_problem<128, 32, Elem::f16>(q, 4) <= 1e-2);
  CHECK(run_problem<512, 64, Elem::bf16>(q, 5) <= 1e-2);
}
