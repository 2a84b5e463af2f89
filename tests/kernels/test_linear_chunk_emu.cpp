// The CUDA chunked linear-recurrence forward (kernels/ejk/kernels/cuda/linear_chunk.cuh) run on
// the CPU through cuda_emu/'s stand-in for ptx.cuh, through both of its users: recurrent
// attention with a per-head and a per-token scalar decay (recurrent_chunk.cuh) and Mamba-2's
// SSD (ssm2_chunk.cuh), each against a float64 recurrence on the same 16-bit inputs. Sizes: K / N
// of 64 and 128, sequences shorter than, equal to and past one chunk, varlen with an empty
// sequence, reverse, groups, head dims that leave a partial column tile, in place.
#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "ejk/kernels/cuda/recurrent_chunk.cuh"
#include "ejk/kernels/cuda/ssm2_chunk.cuh"
#include "linear_chunk_emu_util.h"

namespace ejk::cuda {
alignas(16) unsigned char linear_chunk_smem[128 * 1024];
}

using namespace ejk;
using namespace ejk::cuda;
using namespace linear_chunk_emu;

namespace {

// Blocks one after another, each as kLinearChunkThreads threads over shared memory poisoned first.
template <class F> void launch(long blocks, F body) {
  emu::use_smem(linear_chunk_smem, sizeof(linear_chunk_smem));
  for (long b = 0; b < blocks; ++b) emu::run_block(kLinearChunkThreads, {unsigned(b)}, body);
}

// A recurrent forward key's constants (the chunked keys: no g, gk, gv).
template <int K_, Elem E_, bool G, bool H, bool R> struct RecCfg {
  static constexpr Elem E = E_;
  static constexpr int kK = K_;
  static constexpr bool kG = false, kGk = false, kGv = false, kChunked = true;
  static constexpr bool kGamma = G, kGh = H, kReverse = R;
};

struct RecProblem {
  long b = 1, t = 100, h = 1;
  std::vector<long> lens;  // varlen lengths (b ignored), else dense
  bool gamma = true, head_gate = true, reverse = false, init = true;
};

template <int K, int V, Elem E> void run_recurrent(const RecProblem& pr, unsigned seed) {

  const bool varlen = !pr.lens.empty();
  const std::vector<i32> cu = offsets(pr.lens);
  const long seqs = varlen ? long(pr.lens.size()) : pr.b, total = varlen ? cu.back() : pr.b * pr.t;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  const long n = total * pr.h;
  std::vector<u16> q(n * K), k(n * K), v(n * V), gh(n), o(n * V, 0xffff);
  for (auto& x : q) x = bits<E>(nd(rng));
  for (auto& x : k) x = bits<E>(nd(rng) / std::sqrt(float(K)));
  for (auto& x : v) x = bits<E>(nd(rng));
  for (auto& x : gh) x = bits<E>(-std::log1p(std::exp(-(nd(rng) + 2.0f))));  // log sigmoid, about -0.1
  std::vector<float> gamma(size_t(pr.h)), h0(size_t(seqs * pr.h * K * V)), ht(h0.size(), -1e30f);
  for (auto& x : gamma) x = -0.05f * float(&x - gamma.data() + 1);
  for (auto& x : h0) x = nd(rng);
  RecurrentParams p{};
  auto tokens = [&](void* d, long x) { return RecurrentTokens{d, varlen ? 0 : pr.t * pr.h * x, pr.h * x, x}; };
  p.q = tokens(q.data(), K), p.k = tokens(k.data(), K), p.v = tokens(v.data(), V), p.o = tokens(o.data(), V);
  p.gh = pr.head_gate ? tokens(gh.data(), 1) : RecurrentTokens{};
  p.g_gamma = pr.gamma ? gamma.data() : nullptr;
  p.h0 = pr.init ? h0.data() : nullptr, p.ht = ht.data();
  p.cu_seqlens = varlen ? cu.data() : nullptr;
  p.sequences = seqs, p.seqlen = pr.t, p.total = total, p.heads = pr.h, p.dk_ = K, p.dv_ = V;
  p.scale = 1.0f / std::sqrt(float(K)), p.reverse = pr.reverse;
  p.v_tile = kRecurrentTile, p.v_tiles = V / kRecurrentTile;
  // The flags are the key's: one instantiation per combination the problems use.
  const long blocks = seqs * pr.h * p.v_tiles;
  auto run = [&](auto cfg) { launch(blocks, [&] { recurrent_fwd_entry<decltype(cfg)>(p); }); };
  if (pr.reverse) {
    if (pr.gamma && pr.head_gate) run(RecCfg<K, E, true, true, true>{});
    else run(RecCfg<K, E, false, true, true>{});
  } else if (pr.gamma && pr.head_gate) run(RecCfg<K, E, true, true, false>{});
  else if (pr.gamma) run(RecCfg<K, E, true, false, false>{});
  else run(RecCfg<K, E, false, true, false>{});

  Err eo, es;
  for (long s = 0; s < seqs; ++s)
    for (long h = 0; h < pr.h; ++h) {
      const RecurrentSpan sp = recurrent_span(p, s);
      std::vector<double> S(K * V, 0.0);
      if (pr.init) for (long i = 0; i < K * V; ++i) S[size_t(i)] = h0[size_t((s * pr.h + h) * K * V + i)];
      for (long m = 0; m < sp.end - sp.begin; ++m) {
        const long i = recurrent_token(sp, m, pr.reverse);
        double lg = pr.gamma ? gamma[size_t(h)] : 0.0;
        if (pr.head_gate) lg += val<E>(gh[size_t(recurrent_at(p, p.gh, s, i, h))]);
        const double a = std::exp(lg);
        const long qa = recurrent_at(p, p.q, s, i, h), va = recurrent_at(p, p.v, s, i, h);
        for (int r = 0; r < K; ++r)
          for (int c = 0; c < V; ++c)
            S[size_t(r * V + c)] = S[size_t(r * V + c)] * a + val<E>(k[size_t(qa + r)]) * val<E>(v[size_t(va + c)]);
        for (int c = 0; c < V; ++c) {
          double y = 0;
          for (int r = 0; r < K; ++r) y += val<E>(q[size_t(qa + r)]) * S[size_t(r * V + c)];
          eo.add(val<E>(o[size_t(va + c)]), y * p.scale);
        }
      }
      for (long i = 0; i < K * V; ++i) es.add(ht[size_t((s * pr.h + h) * K * V + i)], S[size_t(i)]);
    }
  std::printf("recurrent K %d V %d %s seqs %ld total %ld h %ld gamma %d g_head %d rev %d init %d: o %.3e state %.3e\n",
              K, V, E == Elem::bf16 ? "bf16" : "f16", seqs, total, pr.h, pr.gamma, pr.head_gate, pr.reverse, pr.init,
              eo.rel(), es.rel());
  CHECK(eo.finite);
  CHECK(es.finite);
  CHECK(eo.rel() <= 1e-2);
  CHECK(es.rel() <= 1e-2);
}

template <int N, Elem E> void run_ssm2(const SsmProblem& pr, unsigned seed) {
  const auto [varlen, cu, seqs, S, packs] = ssm_layout(pr);
  const long P = pr.p, H = pr.h, G = pr.g;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  std::vector<u16> x(packs * S * H * P), B(packs * S * G * N), C(B.size()), dt(packs * S * H), y(x.size(), 0xffff);
  for (auto& e : x) e = bits<E>(nd(rng));
  for (auto& e : B) e = bits<E>(nd(rng) / std::sqrt(float(N)));
  for (auto& e : C) e = bits<E>(nd(rng));
  for (auto& e : dt) e = bits<E>(std::log1p(std::exp(nd(rng) - 2.0f)));  // softplus, about 0.13
  std::vector<float> A{std::vector<float>(size_t(H))}, D{std::vector<float>(size_t(H))}, h0(size_t(seqs * H * P * N)), ht(h0.size(), -1e30f);
  for (auto& e : A) e = -(0.5f + 4.0f * ud(rng));
  for (auto& e : D) e = nd(rng);
  for (auto& e : h0) e = nd(rng);
  const std::vector<float> h0_given = h0;
  Ssm2Params p{};
  auto tokens = [&](void* d, long heads, long w) { return Ssm2Tokens{d, varlen ? 0 : S * heads * w, heads * w, w}; };
  p.x = tokens(x.data(), H, P), p.y = tokens(y.data(), H, P), p.dt = tokens(dt.data(), H, 1);
  p.B = tokens(B.data(), G, N), p.C = tokens(C.data(), G, N);
  p.A = A.data(), p.D = D.data();
  p.h0 = pr.init ? h0.data() : nullptr;
  p.ht = pr.in_place ? h0.data() : ht.data();
  p.cu_seqlens = varlen ? cu.data() : nullptr;
  p.batch = seqs, p.seqlen = S, p.heads = H, p.hdim = P, p.groups = G, p.nstate = N;
  launch(seqs * H * ssm2_chunk_tiles(P), [&] { ssm2_chunk_fwd<SsmCfg<N, E>>(p); });

  Err ey, es;
  for (long s = 0; s < seqs; ++s)
    for (long h = 0; h < H; ++h) {
      const long g = ssm2_group(p, h);
      const TokenSpan sp = ssm1_span(p.cu_seqlens, p.seqlen, s);
      std::vector<double> st(size_t(P * N), 0.0);
      if (pr.init) for (long i = 0; i < P * N; ++i) st[size_t(i)] = h0_given[size_t((s * H + h) * P * N + i)];
      for (long i = sp.begin; i < sp.end; ++i) {
        const double d = val<E>(dt[size_t(ssm2_at(p.dt, s, i, h))]), e = std::exp(double(A[size_t(h)]) * d);
        const long xa = ssm2_at(p.x, s, i, h), ba = ssm2_at(p.B, s, i, g);
        for (long q = 0; q < P; ++q) {
          const double xv = val<E>(x[size_t(xa + q)]);
          double out = double(D[size_t(h)]) * xv;
          for (long j = 0; j < N; ++j) {
            double& hj = st[size_t(q * N + j)];
            hj = e * hj + d * xv * val<E>(B[size_t(ba + j)]);
            out += hj * val<E>(C[size_t(ba + j)]);
          }
          ey.add(val<E>(y[size_t(xa + q)]), out);
        }
      }
      for (long i = 0; i < P * N; ++i) es.add(p.ht[size_t((s * H + h) * P * N + i)], st[size_t(i)]);
    }
  std::printf("ssm2 N %d %s seqs %ld S %ld H %ld G %ld P %ld init %d in place %d: y %.3e state %.3e\n", N,
              E == Elem::bf16 ? "bf16" : "f16", seqs, S, H, G, P, pr.init, pr.in_place, ey.rel(), es.rel());
  CHECK(ey.finite);
  CHECK(es.finite);
  CHECK(ey.rel() <= 1e-2);
  CHECK(es.rel() <= 1e-2);
}

}  // namespace

TEST_CASE("the chunked recurrent kernel's code on emulated threads matches the recurrence", "[recurrent][chunked]") {
  RecProblem p;
  p.b = 2, p.t = 130;
  run_recurrent<64, 64, Elem::bf16>(p, 1);
  p = RecProblem{};
  p.t = 64, p.head_gate = false;
  run_recurrent<128, 64, Elem::f16>(p, 2);
  p = RecProblem{};
  p.lens = {70, 0, 5}, p.h = 2, p.gamma = false, p.init = false;
  run_recurrent<64, 128, Elem::bf16>(p, 3);
  p = RecProblem{};
  p.t = 90, p.reverse = true;
  run_recurrent<128, 128, Elem::bf16>(p, 4);
}

TEST_CASE("chunked SSD's code on emulated threads matches the Mamba-2 scan", "[ssm2][chunked]") {
  SsmProblem p;
  p.b = 2, p.t = 130, p.h = 2, p.g = 2, p.p = 64;
  run_ssm2<128, Elem::bf16>(p, 11);
  p = SsmProblem{};
  p.t = 64, p.h = 2, p.g = 1, p.p = 40, p.init = false;
  run_ssm2<64, Elem::f16>(p, 12);
  p = SsmProblem{};
  p.lens = {100, 0, 7}, p.h = 2, p.g = 1, p.p = 32, p.in_place = true;
  run_ssm2<128, Elem::bf16>(p, 13);
  p = SsmProblem{};
  p.t = 1, p.h = 1, p.p = 20;
  run_ssm2<64, Elem::bf16>(p, 14);
}
