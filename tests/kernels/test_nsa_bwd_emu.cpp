// The CUDA backward of NSA's selection attention (kernels/ejk/kernels/cuda/nsa_bwd.cuh) run on
// the CPU through cuda_emu/'s stand-in for ptx.cuh, both launches in order (dq with the delta
// rows, then dk/dv), against float64 gradients of a softmax over the same 16-bit inputs with
// each key's visibility decided on its own: GQA groups of 1, 4, 16 and 20 heads (a row task and
// a dk/dv batch split across heads), repeated and ignored slots, block counts of 0 and partial,
// tokens without keys, d_lse, blocks of 32, 64 and 96 keys and several sequences.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ejk/kernels/cuda/nsa_bwd.cuh"

namespace ejk::cuda::nsa_bwd_detail {
alignas(16) unsigned char nsa_bwd_smem[64 * 1024];
}

using namespace ejk;
using namespace ejk::cuda;

namespace {

struct Problem {
  long b = 1, t = 100, hq = 4, hkv = 1, s = 3, bs = 64;
  bool counts = false, d_lse = false;
};

template <Elem E> u16 bits(float x) { return E == Elem::bf16 ? bf16_bits(x) : f16_bits(x); }

// The inputs as the kernels read them (BTHD, contiguous) and the float64 gradients.
struct Case {
  long B, T, HQ, HKV, S, D;
  std::vector<u16> q, k, v, out, d_out;
  std::vector<float> lse, d_lse;
  std::vector<i32> idx, cnt;
  std::vector<double> dq, dk, dv;
};

// Random selections: the own block in slot 0, a repeat of it in slot 2, anything from -1 to
// past the last block elsewhere; every 7th row's slots all empty (a token without keys).
template <Elem E> Case make(const Problem& pr, long D, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  Case c{pr.b, pr.t, pr.hq, pr.hkv, pr.s, D};
  c.q.resize(size_t(c.B * c.T * c.HQ * D)), c.k.resize(size_t(c.B * c.T * c.HKV * D)), c.v.resize(c.k.size());
  c.d_out.resize(c.q.size());
  for (auto* x : {&c.q, &c.k, &c.v, &c.d_out})
    for (auto& e : *x) e = bits<E>(normal(rng));
  const long blocks = (c.T + pr.bs - 1) / pr.bs;
  std::uniform_int_distribution<int> any(-1, int(blocks)), count(0, int(c.S));
  c.idx.resize(size_t(c.B * c.T * c.HKV * c.S)), c.cnt.resize(size_t(c.B * c.T * c.HKV));
  for (long row = 0; row < c.B * c.T * c.HKV; ++row) {
    for (long s = 0; s < c.S; ++s) c.idx[size_t(row * c.S + s)] = s == 0 ? int(row / c.HKV % c.T / pr.bs) : any(rng);
    if (c.S > 2) c.idx[size_t(row * c.S + 2)] = c.idx[size_t(row * c.S)];
    if (row % 7 == 3)
      for (long s = 0; s < c.S; ++s) c.idx[size_t(row * c.S + s)] = -1;
    c.cnt[size_t(row)] = count(rng);
  }
  if (pr.d_lse) {
    c.d_lse.resize(size_t(c.B * c.T * c.HQ));
    for (auto& e : c.d_lse) e = normal(rng);
  }
  return c;
}

// Forward and gradients in float64: P over the visible keys, out (rounded to E, as the kernels
// read it) and lse, then dS = P (dP - sum P dP + d_lse), dq = scale dS K, dk += scale dS q,
// dv += P dO.
template <Elem E> void reference(const Problem& pr, Case& c, double scale) {
  const long B = c.B, T = c.T, HQ = c.HQ, HKV = c.HKV, S = c.S, D = c.D, group = HQ / HKV;
  c.out.assign(c.q.size(), 0), c.lse.assign(size_t(B * T * HQ), 0.0f);
  c.dq.assign(c.q.size(), 0.0), c.dk.assign(c.k.size(), 0.0), c.dv.assign(c.k.size(), 0.0);
  auto f = [](const std::vector<u16>& x, long at) { return double(to_f32<E>(x[size_t(at)])); };
  std::vector<double> w(static_cast<size_t>(T)), dp(static_cast<size_t>(T));
  std::vector<char> seen(static_cast<size_t>(T));
  for (long b = 0; b < B; ++b)
    for (long t = 0; t < T; ++t)
      for (long h = 0; h < HQ; ++h) {
        const long hk = h / group, row = (b * T + t) * HKV + hk;
        const long n = pr.counts ? std::clamp<long>(c.cnt[size_t(row)], 0, S) : S;
        const long qa = ((b * T + t) * HQ + h) * D;
        double mx = -INFINITY;
        for (long j = 0; j < T; ++j) {
          seen[size_t(j)] = 0;
          for (long s = 0; s < n && j <= t; ++s) seen[size_t(j)] |= c.idx[size_t(row * S + s)] == j / pr.bs;
          if (!seen[size_t(j)]) continue;
          double dot = 0;
          for (long d = 0; d < D; ++d) dot += f(c.q, qa + d) * f(c.k, ((b * T + j) * HKV + hk) * D + d);
          w[size_t(j)] = dot * scale, mx = std::max(mx, w[size_t(j)]);
        }
        if (mx == -INFINITY) {
          c.lse[size_t((b * T + t) * HQ + h)] = -std::numeric_limits<float>::infinity();
          continue;
        }
        double z = 0;
        for (long j = 0; j < T; ++j)
          if (seen[size_t(j)]) w[size_t(j)] = std::exp(w[size_t(j)] - mx), z += w[size_t(j)];
        c.lse[size_t((b * T + t) * HQ + h)] = float(mx + std::log(z));
        std::vector<double> o(static_cast<size_t>(D), 0.0);
        double sum_pdp = 0;
        for (long j = 0; j < T; ++j) {
          if (!seen[size_t(j)]) continue;
          const long ka = ((b * T + j) * HKV + hk) * D;
          w[size_t(j)] /= z;
          double g = 0;
          for (long d = 0; d < D; ++d) {
            o[size_t(d)] += w[size_t(j)] * f(c.v, ka + d);
            g += f(c.d_out, qa + d) * f(c.v, ka + d);
          }
          dp[size_t(j)] = g, sum_pdp += w[size_t(j)] * g;
        }
        for (long d = 0; d < D; ++d) c.out[size_t(qa + d)] = bits<E>(float(o[size_t(d)]));
        const double dl = c.d_lse.empty() ? 0.0 : double(c.d_lse[size_t((b * T + t) * HQ + h)]);
        for (long j = 0; j < T; ++j) {
          if (!seen[size_t(j)]) continue;
          const long ka = ((b * T + j) * HKV + hk) * D;
          const double ds = w[size_t(j)] * (dp[size_t(j)] - sum_pdp + dl) * scale;
          for (long d = 0; d < D; ++d) {
            c.dq[size_t(qa + d)] += ds * f(c.k, ka + d);
            c.dk[size_t(ka + d)] += ds * f(c.q, qa + d);
            c.dv[size_t(ka + d)] += w[size_t(j)] * f(c.d_out, qa + d);
          }
        }
      }
}

template <Elem E> void expect_close(const char* name, const std::vector<u16>& got, const std::vector<double>& want) {
  double num = 0, den = 0, max_abs = 0;
  bool finite = true;
  for (size_t i = 0; i < got.size(); ++i) {
    const double x = to_f32<E>(got[i]);
    finite &= std::isfinite(x);
    num += (x - want[i]) * (x - want[i]), den += want[i] * want[i];
    max_abs = std::max(max_abs, std::abs(x - want[i]));
  }
  const double rel = std::sqrt(num / std::max(den, 1e-300));
  INFO(name << ": rel-L2 " << rel << ", max-abs " << max_abs);
  CHECK(finite);
  CHECK(den > 0);
  CHECK(rel <= 2e-2);
}

template <Elem E, int D> void check(const Problem& pr, unsigned seed) {
  Case c = make<E>(pr, D, seed);
  NsaParams p{};
  p.scale = 1.0f / std::sqrt(float(D));
  reference<E>(pr, c, double(p.scale));
  const long B = c.B, T = c.T, HQ = c.HQ, HKV = c.HKV, S = c.S;
  std::vector<u16> dq(c.q.size(), 0xffff), dk(c.k.size(), 0xffff), dv(c.k.size(), 0xffff);
  std::vector<float> delta(size_t(B * T * HQ), std::numeric_limits<float>::quiet_NaN());
  p.q = c.q.data(), p.k = c.k.data(), p.v = c.v.data(), p.out = c.out.data(), p.lse = c.lse.data();
  p.d_out = c.d_out.data(), p.d_lse = pr.d_lse ? c.d_lse.data() : nullptr;
  p.dq = dq.data(), p.dk = dk.data(), p.dv = dv.data();
  p.block_indices = c.idx.data(), p.block_counts = pr.counts ? c.cnt.data() : nullptr;
  p.q_stride_h = p.o_stride_h = p.do_stride_h = p.dq_stride_h = D;
  p.q_stride_t = p.o_stride_t = p.do_stride_t = p.dq_stride_t = HQ * D;
  p.q_stride_b = p.o_stride_b = p.do_stride_b = p.dq_stride_b = T * HQ * D;
  p.k_stride_h = p.v_stride_h = p.dk_stride_h = p.dv_stride_h = D;
  p.k_stride_t = p.v_stride_t = p.dk_stride_t = p.dv_stride_t = HKV * D;
  p.k_stride_b = p.v_stride_b = p.dk_stride_b = p.dv_stride_b = T * HKV * D;
  p.lse_stride_h = p.dl_stride_h = 1, p.lse_stride_t = p.dl_stride_t = HQ, p.lse_stride_b = p.dl_stride_b = T * HQ;
  p.bi_stride_s = 1, p.bi_stride_h = S, p.bi_stride_t = HKV * S, p.bi_stride_b = T * HKV * S;
  p.bc_stride_h = 1, p.bc_stride_t = HKV, p.bc_stride_b = T * HKV;
  p.batch = B, p.seqlen = T, p.heads_q = HQ, p.heads_kv = HKV, p.head_dim = D, p.slots = S, p.block_size = pr.bs;
  REQUIRE(size_t(nsa_bwd_cuda_smem(D)) <= sizeof(nsa_bwd_detail::nsa_bwd_smem));
  emu::use_smem(nsa_bwd_detail::nsa_bwd_smem, sizeof(nsa_bwd_detail::nsa_bwd_smem));
  NsaBwdCudaParams a{p, delta.data(), kNsaBwdDq};
  for (long blk = 0; blk < long(nsa_row_tasks(p)); ++blk)
    emu::run_block(kNsaWarpThreads, {unsigned(blk)}, [&] { nsa_bwd<E, D>(a); });
  a.phase = kNsaBwdKv;
  for (long blk = 0; blk < long(nsa_key_tasks(p)); ++blk)
    emu::run_block(kNsaBwdKvThreads, {unsigned(blk)}, [&] { nsa_bwd<E, D>(a); });
  expect_close<E>("dq", dq, c.dq);
  expect_close<E>("dk", dk, c.dk);
  expect_close<E>("dv", dv, c.dv);
  // Keyless rows: dq exactly 0; keys no token sees: dk and dv exactly 0.
  for (size_t i = 0; i < dq.size(); ++i)
    if (c.lse[i / size_t(D)] == -std::numeric_limits<float>::infinity()) REQUIRE(to_f32<E>(dq[i]) == 0.0f);
  for (size_t i = 0; i < dv.size(); ++i)
    if (c.dv[i] == 0.0) REQUIRE((to_f32<E>(dk[i]) == 0.0f && to_f32<E>(dv[i]) == 0.0f));
}

}  // namespace

TEST_CASE("the CUDA NSA selection backward matches float64 gradients on the emulator", "[nsa][emu]") {
  SECTION("GQA 4, repeats, keyless tokens, a partial tile, d64 bf16") { check<Elem::bf16, 64>(Problem{}, 1); }
  SECTION("GQA 1 (16 tokens a batch), two kv heads, block counts 0 to S, d_lse, d32 f16") {
    Problem p;
    p.t = 120, p.hq = 2, p.hkv = 2, p.s = 4, p.bs = 32, p.counts = true, p.d_lse = true;
    check<Elem::f16, 32>(p, 2);
  }
  SECTION("GQA 16 (a token a batch) and 20 (two row tasks, batches across tokens), d128") {
    Problem p;
    p.t = 70, p.hq = 16, p.s = 3, p.counts = true;
    check<Elem::bf16, 128>(p, 3);
    p.hq = 20, p.t = 40, p.bs = 16, p.d_lse = true;
    check<Elem::f16, 32>(p, 4);
  }
  SECTION("two sequences, blocks of 96 keys (two tiles, the second partial), more than 128 tokens") {
    Problem p;
    p.b = 2, p.t = 300, p.hq = 2, p.hkv = 1, p.s = 3, p.bs = 96;
    check<Elem::bf16, 32>(p, 5);
  }
}
