// The CUDA chunked gated delta rule (kernels/ejk/kernels/cuda/delta_chunk.cuh) run on the CPU
// through cuda_emu/'s stand-in for ptx.cuh, both phases, against a float64 recurrence on the
// same 16-bit inputs: its tile indices, fragment layouts, masks, the solve and the barriers,
// checked where no GPU is. Sizes: K and V of 64 and 128, T shorter than, equal to and past one
// chunk, segment starts inside chunks and on their edges, the L2 norm off, in place.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "ejk/kernels/cuda/delta_chunk.cuh"

namespace ejk::cuda {
alignas(16) unsigned char dc_smem[256 * 1024];
}

using namespace ejk;
using namespace ejk::cuda;

namespace {

template <int K_, int V_, Elem E_> struct Cfg {
  static constexpr Elem E = E_;
  static constexpr int kK = K_, kV = V_, kChunk = kDeltaChunk;
};

// Blocks one after another, each as kDeltaThreads threads over shared memory poisoned first.
template <class C> void launch(const DeltaParams& p, long blocks) {
  emu::use_smem(dc_smem, sizeof(dc_smem));
  for (long b = 0; b < blocks; ++b) emu::run_block(kDeltaThreads, {unsigned(b)}, [&] { delta_chunk_fwd<C>(p); });
}

struct Problem {
  long b = 1, t = 100, h = 1;
  bool decay = true, l2norm = true, init = true, in_place = false;
  int segments = 0;  // 0 none; 1 starts at multiples of 64 and 30 tokens into each chunk; 2 random
};

struct Errors {
  double o = 0, state = 0;
  bool finite = true;
};

template <Elem E> u16 bits(float x) { return E == Elem::bf16 ? bf16_bits(x) : f16_bits(x); }

// The float64 recurrence of common/delta_params.h over the same inputs; returns the errors of
// o and of the final state against it.
template <int K, int V, Elem E>
Errors recurrence_errors(const Problem& pr, const DeltaParams& p, const std::vector<float>& h0,
                         const float* final_state) {
  double no = 0, eo = 0, ns = 0, es = 0;
  bool finite = true;
  auto in = [](const DeltaTokens& x, long at) { return double(to_f32<E>(static_cast<const u16*>(x.data)[at])); };
  for (long s = 0; s < pr.b; ++s)
    for (long h = 0; h < pr.h; ++h) {
      std::vector<double> S(K * V, 0.0);
      if (pr.init) std::copy_n(h0.begin() + (s * pr.h + h) * K * V, K * V, S.begin());
      for (long t = 0; t < pr.t; ++t) {
        double q[K], k[K], sq = 0, sk = 0;
        for (int d = 0; d < K; ++d) {
          q[d] = in(p.q, delta_at(p.q, s, t, h) + d), k[d] = in(p.k, delta_at(p.k, s, t, h) + d);
          sq += q[d] * q[d], sk += k[d] * k[d];
        }
        const double qm = (pr.l2norm ? 1 / std::sqrt(sq + 1e-6) : 1.0) * p.scale;
        const double km = pr.l2norm ? 1 / std::sqrt(sk + 1e-6) : 1.0;
        const double g = std::clamp(pr.decay ? in(p.decay, delta_at(p.decay, s, t, h)) : 0.0, -20.0, 20.0);
        const double a = delta_resets(p, s, t) ? 0.0 : std::exp(g), beta = in(p.beta, delta_at(p.beta, s, t, h));
        for (double& x : S) x *= a;
        for (int c = 0; c < V; ++c) {
          double u = 0, o = 0;
          for (int d = 0; d < K; ++d) u += S[d * V + c] * k[d] * km;
          const double dv = beta * (in(p.v, delta_at(p.v, s, t, h) + c) - u);
          for (int d = 0; d < K; ++d) S[d * V + c] += k[d] * km * dv, o += S[d * V + c] * q[d] * qm;
          const double got = to_f32<E>(static_cast<const u16*>(p.o.data)[delta_at(p.o, s, t, h) + c]);
          finite = finite && std::isfinite(got);
          no += o * o, eo += (got - o) * (got - o);
        }
      }
      for (long i = 0; i < K * V; ++i) {
        const double got = final_state[(s * pr.h + h) * K * V + i];
        finite = finite && std::isfinite(got);
        ns += S[i] * S[i], es += (got - S[i]) * (got - S[i]);
      }
    }
  return {std::sqrt(eo / no), std::sqrt(es / ns), finite};
}

template <int K, int V, Elem E> Errors run_problem(const Problem& pr, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  const long n = pr.b * pr.t * pr.h;
  std::vector<u16> q(n * K), k(n * K), v(n * V), beta(n), decay(n), o(n * V, 0xffff);
  const float k_scale = pr.l2norm ? 1.0f : 1.0f / std::sqrt(float(K));  // keeps the state bounded
  for (auto& x : q) x = bits<E>(nd(rng));
  for (auto& x : k) x = bits<E>(nd(rng) * k_scale);
  for (auto& x : v) x = bits<E>(nd(rng));
  for (auto& x : beta) x = bits<E>(1.0f / (1.0f + std::exp(-nd(rng))));
  for (auto& x : decay) x = bits<E>(-std::log1p(std::exp(-(nd(rng) + 2.0f))));
  std::vector<int> seg(size_t(pr.b * pr.t));
  for (long s = 0; s < pr.b; ++s)
    for (long t = 0, id = 0; t < pr.t; ++t) {
      const bool starts = pr.segments == 1 ? t % 64 == 0 || t % 64 == 30 : rng() % 40 == 0;
      seg[size_t(s * pr.t + t)] = int(id += t > 0 && starts);
    }
  std::vector<float> h0(size_t(pr.b * pr.h * K * V)), ht(h0.size(), -1e30f);
  for (auto& x : h0) x = nd(rng);
  const std::vector<float> h0_given = h0;
  DeltaParams p{};
  auto tokens = [&](void* d, long x) { return DeltaTokens{d, pr.t * pr.h * x, pr.h * x, x}; };
  p.q = tokens(q.data(), K), p.k = tokens(k.data(), K), p.v = tokens(v.data(), V), p.o = tokens(o.data(), V);
  p.beta = tokens(beta.data(), 1), p.decay = pr.decay ? tokens(decay.data(), 1) : DeltaTokens{};
  p.seg_ids = pr.segments ? seg.data() : nullptr;
  p.h0 = pr.init ? h0.data() : nullptr;
  p.ht = pr.in_place ? h0.data() : ht.data();
  p.sequences = pr.b, p.seqlen = pr.t, p.heads = pr.h, p.dk_ = K, p.dv_ = V;
  p.scale = 1.0f / std::sqrt(float(K)), p.l2norm = pr.l2norm;
  p.chunks = ceil_div<i64>(pr.t, kDeltaChunk);
  const long units = pr.b * pr.h * p.chunks;
  std::vector<float4> work(size_t(delta_chunk_work_bytes(units, K, V) / 16 + 1));
  p.work = reinterpret_cast<float*>(work.data());
  using C = Cfg<K, V, E>;
  p.phase = 0;
  launch<C>(p, units);
  p.phase = 1;
  launch<C>(p, pr.b * pr.h * (V / kDeltaChunkCols));
  const Errors e = recurrence_errors<K, V, E>(pr, p, h0_given, p.ht);
  std::printf("K %d V %d %s b %ld t %ld h %ld decay %d l2 %d seg %d init %d in place %d: o %.3e state %.3e\n", K,
              V, E == Elem::bf16 ? "bf16" : "f16", pr.b, pr.t, pr.h, pr.decay, pr.l2norm, pr.segments, pr.init,
              pr.in_place, e.o, e.state);
  return e;
}

void check(const Errors& e) {
  CHECK(e.finite);
  CHECK(e.o <= 1e-2);
  CHECK(e.state <= 1e-2);
}

}  // namespace

TEST_CASE("the chunked delta kernel's code on emulated threads matches the recurrence", "[delta][chunked]") {
  Problem p;
  p.b = 2, p.t = 130, p.segments = 1;
  check(run_problem<64, 64, Elem::bf16>(p, 1));
  p = Problem{};
  p.t = 65, p.h = 2, p.decay = false, p.l2norm = false, p.init = false;
  check(run_problem<64, 64, Elem::f16>(p, 2));
  p = Problem{};
  p.t = 100, p.segments = 2;
  check(run_problem<128, 128, Elem::bf16>(p, 3));
  p = Problem{};
  p.t = 64, p.segments = 1;
  check(run_problem<128, 64, Elem::f16>(p, 4));
  p = Problem{};
  p.t = 1;
  check(run_problem<64, 128, Elem::bf16>(p, 5));
  p = Problem{};
  p.t = 200, p.segments = 1, p.in_place = true;
  check(run_problem<128, 128, Elem::bf16>(p, 6));
}
