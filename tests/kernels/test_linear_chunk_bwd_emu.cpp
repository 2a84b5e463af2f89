// The CUDA chunked linear-recurrence backward (kernels/ejk/kernels/cuda/linear_chunk_bwd.cuh)
// run on the CPU through cuda_emu/'s stand-in for ptx.cuh, through recurrent attention's entry
// (recurrent_chunk_bwd.cuh: the sweep, then the sum over column tiles), against a float64
// backward of the recurrence on the same 16-bit inputs: dq, dk, dv, the row gate's gradient
// (dg = dgk), the column gate's (dgv), d g_head (the row gate's summed over K) and
// d_initial_state. Sizes: K 64 and 128, sequences shorter than, equal to and past one chunk, of
// one step, varlen with an empty sequence, reverse, g_gamma only, g_head only, both, neither.
// And through Mamba-2's (ssm2_chunk_bwd.cuh, its three phases) against the float64 backward of
// the scan: dx, dB, dC, ddt, dA, dD, d_initial_state, with groups, partial head-dim tiles (one
// not a multiple of 8: the plain loads), varlen.
#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "ejk/kernels/cuda/recurrent_chunk_bwd.cuh"
#include "ejk/kernels/cuda/ssm2_chunk_bwd.cuh"
#include "linear_chunk_emu_util.h"

namespace ejk::cuda {
alignas(16) unsigned char linear_chunk_smem[160 * 1024];
}

using namespace ejk;
using namespace ejk::cuda;
using namespace linear_chunk_emu;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A backward key's constants; kGh makes recurrent_chunk_view read g_head (the forward's gate),
// which the kernel then differentiates as one more row decay.
template <int K_, Elem E_, bool G, bool H, bool R> struct BwdCfg {
  static constexpr Elem E = E_;
  static constexpr int kK = K_;
  static constexpr bool kG = false, kGk = false, kGv = false, kChunked = true;
  static constexpr bool kGamma = G, kGh = H, kReverse = R;
  static constexpr int kThreads = kLinearChunkThreads;
};

// Every error's line, then the checks: finite (NaN never passes) and rel-L2 <= 2e-2.
struct Named {
  const char* name;
  const Err& e;
};
template <size_t M> void report(const Named (&all)[M]) {
  for (const auto& [name, e] : all) {
    std::printf("  %-8s rel-L2 %.3e max-abs %.3e\n", name, e.rel(), e.max);
    INFO(name);
    CHECK(e.finite);
    CHECK(e.rel() <= 2e-2);
  }
}

struct Problem {
  long b = 1, t = 100, h = 1;
  std::vector<long> lens;  // varlen lengths (b ignored), else dense
  bool gamma = true, head_gate = false, reverse = false, init = true, dht = true;
};

template <class Cfg> void launch(const RecurrentParams& p0, long blocks) {
  RecurrentParams p = p0;
  emu::use_smem(linear_chunk_smem, sizeof(linear_chunk_smem));
  for (long b = 0; b < blocks; ++b)
    emu::run_block(kLinearChunkThreads, {unsigned(b)}, [&] { recurrent_bwd_entry<Cfg>(p); });
  p.phase = 1;
  const long rows = p.total * p.heads * p.dk_;
  for (long b = 0; b < ceil_div<long>(rows, kLinearChunkThreads); ++b)
    emu::run_block(kLinearChunkThreads, {unsigned(b)}, [&] { recurrent_bwd_entry<Cfg>(p); });
}

template <int K, int V, Elem E, bool R> void run(const Problem& pr, unsigned seed) {
  const bool varlen = !pr.lens.empty();
  const std::vector<i32> cu = offsets(pr.lens);
  const long seqs = varlen ? long(pr.lens.size()) : pr.b, total = varlen ? cu.back() : pr.b * pr.t, H = pr.h;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  const long n = total * H;
  std::vector<u16> q(n * K), k(n * K), v(n * V), gh(n), d_o(n * V);
  for (auto& x : q) x = bits<E>(nd(rng));
  for (auto& x : k) x = bits<E>(nd(rng) / std::sqrt(float(K)));
  for (auto& x : v) x = bits<E>(nd(rng));
  for (auto& x : d_o) x = bits<E>(nd(rng));
  for (auto& x : gh) x = bits<E>(-std::log1p(std::exp(-(nd(rng) + 2.0f))));  // log sigmoid, about -0.1
  std::vector<float> gamma(static_cast<size_t>(H)), h0(static_cast<size_t>(seqs * H * K * V)), dht(h0.size());
  for (auto& x : gamma) x = -0.05f * float(&x - gamma.data() + 1);
  for (auto& x : h0) x = nd(rng);
  for (auto& x : dht) x = nd(rng);
  // Outputs poisoned with NaN (0xffff is a NaN in both 16-bit types).
  std::vector<u16> dq(q.size(), 0xffff), dk(k.size(), 0xffff), dv(v.size(), 0xffff), dg(q.size(), 0xffff),
      dgk(q.size(), 0xffff), dgv(v.size(), 0xffff);
  std::vector<float> dh0(h0.size(), kNaN);

  RecurrentParams p{};
  auto tokens = [&](void* d, long x) { return RecurrentTokens{d, varlen ? 0 : pr.t * H * x, H * x, x}; };
  p.q = tokens(q.data(), K), p.k = tokens(k.data(), K), p.v = tokens(v.data(), V);
  p.gh = pr.head_gate ? tokens(gh.data(), 1) : RecurrentTokens{};
  p.d_o = tokens(d_o.data(), V), p.dq = tokens(dq.data(), K), p.dk = tokens(dk.data(), K);
  p.dv = tokens(dv.data(), V), p.dg = tokens(dg.data(), K), p.dgk = tokens(dgk.data(), K);
  p.dgv = tokens(dgv.data(), V);
  p.g_gamma = pr.gamma ? gamma.data() : nullptr;
  p.h0 = pr.init ? h0.data() : nullptr, p.dht = pr.dht ? dht.data() : nullptr, p.dh0 = dh0.data();
  p.cu_seqlens = varlen ? cu.data() : nullptr;
  p.sequences = seqs, p.seqlen = pr.t, p.total = total, p.heads = H, p.dk_ = K, p.dv_ = V;
  p.scale = 1.0f / std::sqrt(float(K)), p.reverse = R;
  p.v_tile = kRecurrentTile, p.v_tiles = V / kRecurrentTile;
  std::vector<float> work(size_t(H * p.v_tiles * linear_chunk_bwd_slots(total, seqs) * K * kLinearChunkCols), kNaN);
  std::vector<float> partial(size_t(p.v_tiles * total * H * 3 * K), kNaN);
  p.work = work.data(), p.partial = partial.data();
  const long blocks = seqs * H * p.v_tiles;
  if (pr.gamma && pr.head_gate) launch<BwdCfg<K, E, true, true, R>>(p, blocks);
  else if (pr.gamma) launch<BwdCfg<K, E, true, false, R>>(p, blocks);
  else if (pr.head_gate) launch<BwdCfg<K, E, false, true, R>>(p, blocks);
  else launch<BwdCfg<K, E, false, false, R>>(p, blocks);

  Err eq, ek, ev, eg, egk, egv, ehead, eh0;
  for (long s = 0; s < seqs; ++s)
    for (long h = 0; h < H; ++h) {
      const RecurrentSpan sp = recurrent_span(p, s);
      const long len = sp.end - sp.begin;
      // States after each step (index m + 1; 0 the initial), then D = dL/dS carried back.
      std::vector<std::vector<double>> S(size_t(len + 1), std::vector<double>(size_t(K * V), 0.0));
      std::vector<double> a(static_cast<size_t>(len));
      const long st0 = (s * H + h) * K * V;
      if (pr.init) for (long e = 0; e < K * V; ++e) S[0][size_t(e)] = h0[size_t(st0 + e)];
      auto tok = [&](long m, const RecurrentTokens& t) { return recurrent_at(p, t, s, recurrent_token(sp, m, R), h); };
      for (long m = 0; m < len; ++m) {
        double lg = pr.gamma ? gamma[size_t(h)] : 0.0;
        if (pr.head_gate) lg += val<E>(gh[size_t(tok(m, p.gh))]);
        a[size_t(m)] = std::exp(lg);
        const long ka = tok(m, p.k), va = tok(m, p.v);
        for (int r = 0; r < K; ++r)
          for (int c = 0; c < V; ++c)
            S[size_t(m + 1)][size_t(r * V + c)] =
                S[size_t(m)][size_t(r * V + c)] * a[size_t(m)] + val<E>(k[size_t(ka + r)]) * val<E>(v[size_t(va + c)]);
      }
      std::vector<double> D(size_t(K * V), 0.0);
      if (pr.dht) for (long e = 0; e < K * V; ++e) D[size_t(e)] = dht[size_t(st0 + e)];
      for (long m = len - 1; m >= 0; --m) {
        const long qa = tok(m, p.q), va = tok(m, p.v);
        for (int r = 0; r < K; ++r)
          for (int c = 0; c < V; ++c)
            D[size_t(r * V + c)] += p.scale * val<E>(q[size_t(qa + r)]) * val<E>(d_o[size_t(va + c)]);
        std::vector<double> gcol(static_cast<size_t>(V), 0.0);
        double ghead = 0.0;
        for (int r = 0; r < K; ++r) {
          double wq = 0, wk = 0, wg = 0;
          for (int c = 0; c < V; ++c) {
            const double d = D[size_t(r * V + c)], prior = S[size_t(m)][size_t(r * V + c)] * a[size_t(m)];
            wq += S[size_t(m + 1)][size_t(r * V + c)] * val<E>(d_o[size_t(va + c)]);
            wk += d * val<E>(v[size_t(va + c)]);
            wg += d * prior, gcol[size_t(c)] += d * prior;
          }
          eq.add(val<E>(dq[size_t(qa + r)]), p.scale * wq);
          ek.add(val<E>(dk[size_t(qa + r)]), wk);
          eg.add(val<E>(dg[size_t(qa + r)]), wg);
          egk.add(val<E>(dgk[size_t(qa + r)]), wg);
          ghead += wg;
        }
        double head = 0.0;  // d g_head as the op's wrappers form it: dg summed over K
        for (int r = 0; r < K; ++r) head += val<E>(dg[size_t(qa + r)]);
        ehead.add(head, ghead);
        for (int c = 0; c < V; ++c) {
          double wv = 0;
          for (int r = 0; r < K; ++r) wv += D[size_t(r * V + c)] * val<E>(k[size_t(qa + r)]);
          ev.add(val<E>(dv[size_t(va + c)]), wv);
          egv.add(val<E>(dgv[size_t(va + c)]), gcol[size_t(c)]);
        }
        for (auto& d : D) d *= a[size_t(m)];
      }
      for (long e = 0; e < K * V; ++e) eh0.add(dh0[size_t(st0 + e)], D[size_t(e)]);
    }
  std::printf("K %d V %d %s seqs %ld total %ld H %ld gamma %d g_head %d rev %d init %d dht %d\n", K, V,
              E == Elem::bf16 ? "bf16" : "f16", seqs, total, H, pr.gamma, pr.head_gate, R, pr.init, pr.dht);
  report({{"dq", eq}, {"dk", ek}, {"dv", ev}, {"dg", eg}, {"dgk", egk}, {"dgv", egv}, {"dg_head", ehead}, {"dh0", eh0}});
}

template <int N, Elem E> void run_ssm2(const SsmProblem& pr, unsigned seed) {
  const auto [varlen, cu, seqs, S, packs] = ssm_layout(pr);
  const long P = pr.p, H = pr.h, G = pr.g;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  std::vector<u16> x(packs * S * H * P), B(packs * S * G * N), C(B.size()), dt(packs * S * H), dy(x.size());
  for (auto& e : x) e = bits<E>(nd(rng));
  for (auto& e : B) e = bits<E>(nd(rng) / std::sqrt(float(N)));
  for (auto& e : C) e = bits<E>(nd(rng));
  for (auto& e : dy) e = bits<E>(nd(rng));
  for (auto& e : dt) e = bits<E>(std::log1p(std::exp(nd(rng) - 2.0f)));  // softplus, about 0.13
  std::vector<float> A(static_cast<size_t>(H)), D(A.size()), h0(static_cast<size_t>(seqs * H * P * N)), dht(h0.size());
  for (auto& e : A) e = -(0.5f + 4.0f * ud(rng));
  for (auto& e : D) e = nd(rng);
  for (auto& e : h0) e = nd(rng);
  for (auto& e : dht) e = nd(rng);
  std::vector<u16> dx(x.size(), 0xffff), dB(B.size(), 0xffff), dC(C.size(), 0xffff), ddt(dt.size(), 0xffff);
  std::vector<float> dA(A.size(), kNaN), dD(D.size(), kNaN), dh0(h0.size(), kNaN);
  Ssm2Params p{};
  auto tokens = [&](void* d, long heads, long w) { return Ssm2Tokens{d, varlen ? 0 : S * heads * w, heads * w, w}; };
  p.x = tokens(x.data(), H, P), p.dt = tokens(dt.data(), H, 1), p.B = tokens(B.data(), G, N), p.C = tokens(C.data(), G, N);
  p.d_y = tokens(dy.data(), H, P), p.dx = tokens(dx.data(), H, P), p.ddt = tokens(ddt.data(), H, 1);
  p.dB = tokens(dB.data(), G, N), p.dC = tokens(dC.data(), G, N);
  p.A = A.data(), p.D = D.data(), p.dA = dA.data(), p.dD = dD.data();
  p.h0 = pr.init ? h0.data() : nullptr, p.dht = pr.dht ? dht.data() : nullptr, p.dh0 = dh0.data();
  p.cu_seqlens = varlen ? cu.data() : nullptr;
  p.batch = seqs, p.seqlen = S, p.heads = H, p.hdim = P, p.groups = G, p.nstate = N;
  const long rows = packs * S;
  std::vector<float> work(static_cast<size_t>(ssm2_chunk_work_floats(rows, seqs, H, P, N)), kNaN);
  p.work = work.data();
  emu::use_smem(linear_chunk_smem, sizeof(linear_chunk_smem));
  for (i32 phase = 1; phase <= 3; ++phase) {
    p.phase = phase;
    for (long b = 0; b < ssm2_chunk_bwd_blocks(phase, seqs, rows, H, G, P, N); ++b)
      emu::run_block(kLinearChunkThreads, {unsigned(b)}, [&] { ssm2_chunk_bwd<SsmCfg<N, E>>(p); });
  }

  // The float64 backward of the scan (common/ssm2_params.h), per (sequence, head, head dim).
  std::vector<double> rdx(x.size(), 0.0), rdB(B.size(), 0.0), rdC(C.size(), 0.0), rddt(dt.size(), 0.0);
  std::vector<double> rdA(A.size(), 0.0), rdD(D.size(), 0.0), rdh0(h0.size(), 0.0);
  for (long s = 0; s < seqs; ++s)
    for (long h = 0; h < H; ++h) {
      const long g = ssm2_group(p, h);
      const TokenSpan sp = ssm1_span(p.cu_seqlens, p.seqlen, s);
      const long len = sp.end - sp.begin;
      for (long q = 0; q < P; ++q) {
        std::vector<std::vector<double>> st(static_cast<size_t>(len + 1), std::vector<double>(static_cast<size_t>(N), 0.0));
        const long at0 = ((s * H + h) * P + q) * N;
        if (pr.init) for (long j = 0; j < N; ++j) st[0][size_t(j)] = h0[size_t(at0 + j)];
        auto dtv = [&](long m) { return val<E>(dt[size_t(ssm2_at(p.dt, s, sp.begin + m, h))]); };
        for (long m = 0; m < len; ++m) {
          const long i = sp.begin + m, ba = ssm2_at(p.B, s, i, g);
          const double d = dtv(m), e = std::exp(double(A[size_t(h)]) * d), xv = val<E>(x[size_t(ssm2_at(p.x, s, i, h) + q)]);
          for (long j = 0; j < N; ++j) st[size_t(m + 1)][size_t(j)] = e * st[size_t(m)][size_t(j)] + d * xv * val<E>(B[size_t(ba + j)]);
        }
        std::vector<double> dh(static_cast<size_t>(N), 0.0);
        if (pr.dht) for (long j = 0; j < N; ++j) dh[size_t(j)] = dht[size_t(at0 + j)];
        for (long m = len - 1; m >= 0; --m) {
          const long i = sp.begin + m, ba = ssm2_at(p.B, s, i, g), xa = ssm2_at(p.x, s, i, h) + q;
          const double d = dtv(m), e = std::exp(double(A[size_t(h)]) * d), xv = val<E>(x[size_t(xa)]), dyv = val<E>(dy[size_t(xa)]);
          rdD[size_t(h)] += dyv * xv;
          double dxv = dyv * D[size_t(h)], ddtv = 0.0;
          for (long j = 0; j < N; ++j) {
            const double bj = val<E>(B[size_t(ba + j)]), cj = val<E>(C[size_t(ba + j)]);
            const double dj = dh[size_t(j)] + dyv * cj, prev = st[size_t(m)][size_t(j)];
            rdC[size_t(ba + j)] += dyv * st[size_t(m + 1)][size_t(j)];
            ddtv += dj * (double(A[size_t(h)]) * e * prev + xv * bj);
            rdA[size_t(h)] += dj * e * d * prev;
            dxv += dj * d * bj;
            rdB[size_t(ba + j)] += dj * d * xv;
            dh[size_t(j)] = dj * e;
          }
          rdx[size_t(xa)] = dxv;
          rddt[size_t(ssm2_at(p.dt, s, i, h))] += ddtv;
        }
        for (long j = 0; j < N; ++j) rdh0[size_t(at0 + j)] = dh[size_t(j)];
      }
    }
  Err ex, eb, ec, edt, ea, ed, eh0;
  for (size_t i = 0; i < x.size(); ++i) ex.add(val<E>(dx[i]), rdx[i]);
  for (size_t i = 0; i < B.size(); ++i) eb.add(val<E>(dB[i]), rdB[i]), ec.add(val<E>(dC[i]), rdC[i]);
  for (size_t i = 0; i < dt.size(); ++i) edt.add(val<E>(ddt[i]), rddt[i]);
  for (size_t i = 0; i < A.size(); ++i) ea.add(dA[i], rdA[i]), ed.add(dD[i], rdD[i]);
  for (size_t i = 0; i < h0.size(); ++i) eh0.add(dh0[i], rdh0[i]);
  std::printf("ssm2 N %d %s seqs %ld S %ld H %ld G %ld P %ld init %d dht %d\n", N, E == Elem::bf16 ? "bf16" : "f16",
              seqs, S, H, G, P, pr.init, pr.dht);
  report({{"dx", ex}, {"dB", eb}, {"dC", ec}, {"ddt", edt}, {"dA", ea}, {"dD", ed}, {"dh0", eh0}});
}

}  // namespace

TEST_CASE("the chunked recurrent backward's code on emulated threads matches the float64 backward",
          "[recurrent][chunked][backward]") {
  Problem p;
  p.b = 2, p.t = 130;  // g_gamma only: past two chunks
  run<64, 64, Elem::bf16, false>(p, 1);
  p = Problem{};
  p.t = 64, p.gamma = false, p.head_gate = true, p.dht = false;  // g_head only, one full chunk
  run<128, 64, Elem::f16, true>(p, 2);
  p = Problem{};
  p.lens = {70, 0, 5}, p.h = 2, p.head_gate = true, p.init = false;  // both, varlen with an empty sequence
  run<64, 64, Elem::bf16, true>(p, 3);
  p = Problem{};
  p.t = 1, p.gamma = false;  // neither gate, one step
  run<64, 32, Elem::bf16, false>(p, 4);
}

TEST_CASE("chunked SSD's backward code on emulated threads matches the float64 Mamba-2 backward",
          "[ssm2][chunked][backward]") {
  SsmProblem p;
  p.b = 2, p.t = 130, p.h = 2, p.g = 2, p.p = 32;  // past two chunks, a group per head
  run_ssm2<64, Elem::bf16>(p, 11);
  p = SsmProblem{};
  p.t = 64, p.h = 2, p.g = 1, p.p = 40, p.init = false;  // two heads in a group, a partial tile
  run_ssm2<128, Elem::f16>(p, 12);
  p = SsmProblem{};
  p.lens = {70, 0, 7}, p.h = 1, p.p = 20, p.dht = false;  // varlen with an empty sequence, plain loads
  run_ssm2<64, Elem::bf16>(p, 13);
}
