// The CUDA forward of NSA's selection attention (kernels/ejk/kernels/cuda/nsa_fwd.cuh) run on
// the CPU through cuda_emu/'s stand-in for ptx.cuh, against a float64 softmax over the same
// 16-bit inputs with each key's visibility decided on its own: its fragment layouts, the row
// chunks of a wide GQA group, partial tiles, repeated and ignored slots, block counts and tokens
// without keys, checked where no GPU is.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "ejk/kernels/cuda/nsa_fwd.cuh"

namespace ejk::cuda {
alignas(16) unsigned char nsa_smem[64 * 1024];
}

using namespace ejk;
using namespace ejk::cuda;

namespace {

template <Elem E, int D> void launch(const NsaParams& p, long blocks) {
  emu::use_smem(nsa_smem, sizeof(nsa_smem));
  for (long blk = 0; blk < blocks; ++blk) emu::run_block(kNsaWarpThreads, {unsigned(blk)}, [&] { nsa_fwd<E, D>(p); });
}

struct Problem {
  long b = 1, t = 100, hq = 4, hkv = 2, s = 3, bs = 64;
  bool counts = false;
};

template <Elem E> u16 bits(float x) { return E == Elem::bf16 ? bf16_bits(x) : f16_bits(x); }

// out within 2e-2 of its largest value, lse within 1e-2, tokens without keys 0 with lse -inf.
template <Elem E, int D> void check(const Problem& pr, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  const long T = pr.t, HQ = pr.hq, HKV = pr.hkv, S = pr.s, B = pr.b;
  std::vector<u16> q(size_t(B * T * HQ * D)), k(size_t(B * T * HKV * D)), v(k.size()), out(q.size(), 0xffff);
  for (auto* x : {&q, &k, &v})
    for (auto& e : *x) e = bits<E>(normal(rng));
  std::vector<i32> idx(size_t(B * T * HKV * S)), cnt(size_t(B * T * HKV));
  const long blocks = (T + pr.bs - 1) / pr.bs;
  std::uniform_int_distribution<int> any(-1, int(blocks)), count(0, int(S));
  for (long row = 0; row < B * T * HKV; ++row) {
    for (long s = 0; s < S; ++s) idx[size_t(row * S + s)] = s == 0 ? int(row / HKV % T / pr.bs) : any(rng);
    if (S > 2) idx[size_t(row * S + 2)] = idx[size_t(row * S)];  // a repeat
    cnt[size_t(row)] = count(rng);
  }
  std::vector<float> lse(size_t(B * T * HQ), 7.0f);
  NsaParams p{};
  p.q = q.data(), p.k = k.data(), p.v = v.data(), p.out = out.data(), p.lse = lse.data();
  p.block_indices = idx.data(), p.block_counts = pr.counts ? cnt.data() : nullptr;
  p.q_stride_h = p.o_stride_h = D, p.q_stride_t = p.o_stride_t = HQ * D, p.q_stride_b = p.o_stride_b = T * HQ * D;
  p.k_stride_h = p.v_stride_h = D, p.k_stride_t = p.v_stride_t = HKV * D, p.k_stride_b = p.v_stride_b = T * HKV * D;
  p.lse_stride_h = 1, p.lse_stride_t = HQ, p.lse_stride_b = T * HQ;
  p.bi_stride_s = 1, p.bi_stride_h = S, p.bi_stride_t = HKV * S, p.bi_stride_b = T * HKV * S;
  p.bc_stride_h = 1, p.bc_stride_t = HKV, p.bc_stride_b = T * HKV;
  p.batch = B, p.seqlen = T, p.heads_q = HQ, p.heads_kv = HKV, p.head_dim = D, p.slots = S, p.block_size = pr.bs;
  p.scale = 1.0f / std::sqrt(float(D));
  launch<E, D>(p, long(nsa_row_tasks(p)));
  double err = 0, scale = 0;
  const long group = HQ / HKV;
  for (long b = 0; b < B; ++b)
    for (long t = 0; t < T; ++t)
      for (long h = 0; h < HQ; ++h) {
        const long hk = h / group;
        const long n = pr.counts ? std::clamp<long>(cnt[size_t((b * T + t) * HKV + hk)], 0, S) : S;
        std::vector<double> w(static_cast<size_t>(T), 0.0);
        double mx = -INFINITY;
        for (long j = 0; j <= t; ++j) {
          bool seen = false;
          for (long s = 0; s < n; ++s) seen |= idx[size_t(((b * T + t) * HKV + hk) * S + s)] == j / pr.bs;
          if (!seen) continue;
          double dot = 0;
          for (int d = 0; d < D; ++d)
            dot += double(to_f32<E>(q[size_t(((b * T + t) * HQ + h) * D + d)])) *
                   double(to_f32<E>(k[size_t(((b * T + j) * HKV + hk) * D + d)]));
          w[size_t(j)] = dot * double(p.scale);
          mx = std::max(mx, w[size_t(j)]);
        }
        const float got_lse = lse[size_t((b * T + t) * HQ + h)];
        std::vector<double> o(static_cast<size_t>(D), 0.0);
        if (mx == -INFINITY) {
          REQUIRE(std::isinf(got_lse));
        } else {
          double z = 0;
          std::vector<double> e(static_cast<size_t>(T), 0.0);
          for (long j = 0; j <= t; ++j) {
            bool seen = false;
            for (long s = 0; s < n; ++s) seen |= idx[size_t(((b * T + t) * HKV + hk) * S + s)] == j / pr.bs;
            if (seen) e[size_t(j)] = std::exp(w[size_t(j)] - mx), z += e[size_t(j)];
          }
          for (long j = 0; j <= t; ++j)
            for (int d = 0; d < D; ++d)
              o[size_t(d)] += e[size_t(j)] / z * double(to_f32<E>(v[size_t(((b * T + j) * HKV + hk) * D + d)]));
          REQUIRE(std::abs(double(got_lse) - (mx + std::log(z))) <= 1e-2 * (1 + std::abs(mx)));
        }
        for (int d = 0; d < D; ++d) {
          const double got = to_f32<E>(out[size_t(((b * T + t) * HQ + h) * D + d)]);
          REQUIRE(std::isfinite(got));
          err = std::max(err, std::abs(got - o[size_t(d)]));
          scale = std::max(scale, std::abs(o[size_t(d)]));
        }
      }
  INFO("max error " << err << " of " << scale);
  CHECK(err <= 2e-2 * std::max(1.0, scale));
}

}  // namespace

TEST_CASE("the CUDA NSA selection forward matches float64 on the emulator", "[nsa][emu]") {
  SECTION("GQA 2, a partial tile, repeats, d64 bf16") { check<Elem::bf16, 64>(Problem{}, 1); }
  SECTION("a group of 20 heads (two row tasks), block counts, d128 f16") {
    Problem p;
    p.t = 70, p.hq = 20, p.hkv = 1, p.s = 4, p.counts = true;
    check<Elem::f16, 128>(p, 2);
  }
  SECTION("blocks of 32 and of 96 keys (two tiles), two sequences, d32") {
    Problem p;
    p.b = 2, p.t = 100, p.hq = 2, p.hkv = 1, p.s = 2, p.bs = 32;
    check<Elem::bf16, 32>(p, 3);
    p.bs = 96, p.b = 1, p.t = 200;
    check<Elem::bf16, 32>(p, 4);
  }
}
