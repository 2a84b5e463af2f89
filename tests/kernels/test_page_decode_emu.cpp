// The CUDA tensor-core paged decode (kernels/ejk/kernels/cuda/page_decode_tc.cuh) run on the
// CPU through cuda_emu/'s stand-in for ptx.cuh, against a float64 softmax on the same 16-bit
// inputs: its block and tile indices, the cp.async ring, the fragment layouts, the per-warp
// softmax and the final merge, where no GPU is. Shapes: GQA 1, 4, 6, 8 and a group wider
// than a block's 16 rows; pages of 5, 16 and 64 shuffled; contexts 0, 1, 17, 75, 300;
// D 64, 80, 128, 256; softcap, window, split-KV partials (merged here by
// merge_states_params.h's rule), empty splits; and the ragged family's one-token blocks
// (ragged_decode_tc.cuh): decode and the last prefill token, ALiBi, qq_bias, sinks, the lse.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "ejk/kernels/cuda/page_decode_tc.cuh"
#include "ejk/kernels/cuda/ragged_decode_tc.cuh"

namespace ejk::cuda {
alignas(16) unsigned char page_tc_smem[232 * 1024];
}

using namespace ejk;
using namespace ejk::cuda;

namespace {

template <int D_, Elem E_> struct Cfg {
  static constexpr Elem E = E_;
  static constexpr int kD = D_;
};

// Blocks one after another, each as kPageThreads threads over shared memory poisoned first;
// body(b) is block b's code.
template <int D, class Body> void launch_blocks(long blocks, const Body& body) {
  REQUIRE(size_t(page_tc_smem_bytes(D)) <= sizeof(page_tc_smem));
  emu::use_smem(page_tc_smem, sizeof(page_tc_smem));
  for (long b = 0; b < blocks; ++b) emu::run_block(kPageThreads, {unsigned(b)}, [&] { body(b); });
}

template <class C> void launch(const PageAttentionParams& p, long blocks) {
  launch_blocks<C::kD>(blocks, [&](long) { page_decode_tc<C>(p); });
}

struct Problem {
  long hq = 4, hkv = 4, bs = 16;
  std::vector<long> contexts{1, 17, 300};
  float softcap = 0, scale = 0;  // scale 0: 1 / sqrt(D)
  long window = 0, split_tokens = 0;  // split_tokens 0: one split
};

template <Elem E> u16 bits(float x) { return E == Elem::bf16 ? bf16_bits(x) : f16_bits(x); }

struct Errors {
  double rel = 0;
  bool finite = true, empty_zero = true;
};

template <int D, Elem E> Errors run_problem(const Problem& pr, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  const long S = long(pr.contexts.size());
  const long longest = *std::max_element(pr.contexts.begin(), pr.contexts.end());
  const long mb = std::max<long>(1, (longest + pr.bs - 1) / pr.bs), nb = S * mb + 3;
  std::vector<u16> q(size_t(S * pr.hq * D)), kc(size_t(nb * pr.hkv * pr.bs * D)), vc(kc.size());
  for (auto& x : q) x = bits<E>(nd(rng));
  for (auto& x : kc) x = bits<E>(nd(rng));
  for (auto& x : vc) x = bits<E>(nd(rng));
  std::vector<i32> perm(static_cast<size_t>(nb));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<i32> tables(size_t(S * mb)), lens(static_cast<size_t>(S));
  for (size_t i = 0; i < tables.size(); ++i) tables[i] = perm[i];
  for (long s = 0; s < S; ++s) lens[size_t(s)] = i32(pr.contexts[size_t(s)]);

  PageAttentionParams p{};
  p.q = q.data(), p.k_cache = kc.data(), p.v_cache = vc.data();
  p.context_lens = lens.data(), p.block_tables = tables.data();
  p.seqs = S, p.q_heads = pr.hq, p.kv_heads = pr.hkv, p.head_dim = D, p.num_blocks = nb, p.block_size = pr.bs;
  p.max_blocks = mb;
  p.q_ss = pr.hq * D, p.q_sh = D, p.o_ss = pr.hq * D, p.o_sh = D;
  p.k_sb = p.v_sb = pr.hkv * pr.bs * D, p.k_sh = p.v_sh = pr.bs * D, p.k_st = p.v_st = D;
  p.bt_ss = mb;
  p.scale = pr.scale > 0 ? pr.scale : 1.0f / std::sqrt(float(D));
  p.softcap = pr.softcap, p.window = pr.window, p.max_context = mb * pr.bs, p.vec = 1;
  const long span = std::max<long>(1, pr.window > 0 ? std::min<long>(pr.window, p.max_context) : p.max_context);
  p.split_tokens = pr.split_tokens > 0 ? pr.split_tokens : (span + kPageTile - 1) / kPageTile * kPageTile;
  p.splits = (span + p.split_tokens - 1) / p.split_tokens;
  std::vector<u16> out(q.size(), 0xffff);  // NaN: every row must be written
  std::vector<float> part_out(size_t(p.splits * S * pr.hq * D), NAN), part_lse(size_t(p.splits * S * pr.hq), NAN);
  p.out = out.data(), p.part_out = part_out.data(), p.part_lse = part_lse.data();
  const long groups = (pr.hq / pr.hkv + kPageMaxGroup - 1) / kPageMaxGroup;
  launch<Cfg<D, E>>(p, S * pr.hkv * groups * p.splits);

  Errors e;
  double num = 0, den = 0;
  auto f = [](u16 x) { return double(to_f32<E>(x)); };
  for (long s = 0; s < S; ++s)
    for (long h = 0; h < pr.hq; ++h) {
      const long g = h / (pr.hq / pr.hkv), n = std::min<long>(lens[size_t(s)], p.max_context);
      const long b0 = pr.window > 0 ? std::max<long>(0, n - pr.window) : 0;
      std::vector<double> x(size_t(std::max<long>(n, 1))), ref(D, 0.0), got(D, 0.0);
      double mx = -INFINITY, sum = 0;
      auto at = [&](long j) { return (tables[size_t(s * mb + j / pr.bs)] * pr.hkv + g) * pr.bs * D + j % pr.bs * D; };
      for (long j = b0; j < n; ++j) {
        double d = 0;
        for (int c = 0; c < D; ++c) d += f(q[size_t((s * pr.hq + h) * D + c)]) * f(kc[size_t(at(j) + c)]);
        d *= p.scale;
        if (pr.softcap > 0) d = pr.softcap * std::tanh(d / pr.softcap);
        x[size_t(j)] = d, mx = std::max(mx, d);
      }
      for (long j = b0; j < n; ++j) sum += std::exp(x[size_t(j)] - mx);
      for (long j = b0; j < n; ++j)
        for (int c = 0; c < D; ++c) ref[c] += std::exp(x[size_t(j)] - mx) / sum * f(vc[size_t(at(j) + c)]);
      if (p.splits == 1) {
        for (int c = 0; c < D; ++c) got[c] = f(out[size_t((s * pr.hq + h) * D + c)]);
      } else {  // the combine's rule: weights exp(lse_k - max), all -inf: 0
        const long rows = S * pr.hq, row = s * pr.hq + h;
        double m = -INFINITY, total = 0;
        for (long k = 0; k < p.splits; ++k) m = std::max(m, double(part_lse[size_t(k * rows + row)]));
        for (long k = 0; k < p.splits && m > -INFINITY; ++k) {
          const double w = std::exp(double(part_lse[size_t(k * rows + row)]) - m);
          total += w;
          for (int c = 0; c < D; ++c) got[c] += w * part_out[size_t((k * rows + row) * D + c)];
        }
        for (int c = 0; c < D; ++c) got[c] = total > 0 ? got[c] / total : 0.0;
      }
      for (int c = 0; c < D; ++c) {
        e.finite = e.finite && std::isfinite(got[c]);
        if (n <= b0) e.empty_zero = e.empty_zero && got[c] == 0.0;
        num += (got[c] - ref[c]) * (got[c] - ref[c]), den += ref[c] * ref[c];
      }
    }
  e.rel = std::sqrt(num / den);
  std::printf("D %d %s hq %ld hkv %ld bs %ld contexts", D, E == Elem::bf16 ? "bf16" : "f16", pr.hq, pr.hkv, pr.bs);
  for (long c : pr.contexts) std::printf(" %ld", c);
  std::printf(" softcap %g window %ld splits %ld: rel-L2 %.3e\n", pr.softcap, pr.window, long(p.splits), e.rel);
  return e;
}

void check(const Errors& e) {
  CHECK(e.finite);
  CHECK(e.empty_zero);
  CHECK(e.rel <= 1e-2);
}

}  // namespace

TEST_CASE("the tensor-core paged decode on emulated threads matches a float64 softmax", "[page][decode]") {
  Problem p;  // GQA 1, page 16, contexts 1, 17, 300
  check(run_problem<64, Elem::bf16>(p, 1));
  p = Problem{};  // GQA 4, page 64, a softcap and an empty sequence
  p.hq = 8, p.hkv = 2, p.bs = 64, p.contexts = {300, 17, 0}, p.softcap = 5.0f, p.scale = 0.5f;
  check(run_problem<64, Elem::f16>(p, 2));
  p = Problem{};  // GQA 6, D 128, a window cutting inside pages
  p.hq = 12, p.hkv = 2, p.bs = 16, p.contexts = {300, 1}, p.window = 100;
  check(run_problem<128, Elem::bf16>(p, 3));
  p = Problem{};  // GQA 8, split-KV partials with a window and a softcap
  p.hq = 8, p.hkv = 1, p.bs = 64, p.contexts = {300, 17}, p.softcap = 30.0f, p.window = 250, p.split_tokens = 128;
  check(run_problem<64, Elem::bf16>(p, 4));
  p = Problem{};  // a group of 20: two blocks of query rows; pages of 5
  p.hq = 20, p.hkv = 1, p.bs = 5, p.contexts = {75}, p.split_tokens = 64;
  check(run_problem<80, Elem::f16>(p, 5));
  p = Problem{};  // GQA 8 in f16, splits of one tile, some of them empty
  p.hq = 16, p.hkv = 2, p.bs = 16, p.contexts = {17, 300, 1}, p.window = 200, p.split_tokens = 64;
  check(run_problem<128, Elem::f16>(p, 6));
  p = Problem{};  // the widest head dim
  p.hq = 4, p.hkv = 2, p.bs = 16, p.contexts = {130, 64};
  check(run_problem<256, Elem::bf16>(p, 7));
}

namespace {

// One token per block row of the ragged family: decode tokens (n_q 1) and the last token of a
// prefill sequence (n_q 3, causal), on a token-major cache [pages, slot, Hkv, D].
struct RaggedProblem {
  long hq = 8, hkv = 2, ps = 16;
  std::vector<long> contexts{1, 17, 300};
  long n_q = 1, window = 0;
  float softcap = 0;
  bool alibi = false, sinks = false, qq = false;
};

template <int D, Elem E> Errors run_ragged(const RaggedProblem& pr, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  const long S = long(pr.contexts.size()), group = pr.hq / pr.hkv;
  const long longest = *std::max_element(pr.contexts.begin(), pr.contexts.end());
  const long mb = std::max<long>(1, (longest + pr.ps - 1) / pr.ps), np = S * mb + 2, T = S * pr.n_q;
  std::vector<u16> q(size_t(T * pr.hq * D)), kc(size_t(np * pr.ps * pr.hkv * D)), vc(kc.size());
  for (auto& x : q) x = bits<E>(nd(rng));
  for (auto& x : kc) x = bits<E>(nd(rng));
  for (auto& x : vc) x = bits<E>(nd(rng));
  std::vector<i32> perm(static_cast<size_t>(np)), tables(size_t(S * mb)), lens(static_cast<size_t>(S));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (size_t i = 0; i < tables.size(); ++i) tables[i] = perm[i];
  for (long s = 0; s < S; ++s) lens[size_t(s)] = i32(pr.contexts[size_t(s)]);
  std::vector<float> alibi(size_t(pr.hq)), sinks(size_t(pr.hq)), qq(4);
  for (auto& x : alibi) x = -0.05f * std::abs(nd(rng));
  for (auto& x : sinks) x = nd(rng);
  for (auto& x : qq) x = nd(rng);

  RaggedPageParams p{};
  p.q = q.data(), p.k = kc.data(), p.v = vc.data(), p.context_lens = lens.data(), p.block_tables = tables.data();
  p.sinks = pr.sinks ? sinks.data() : nullptr, p.alibi = pr.alibi ? alibi.data() : nullptr;
  p.qq_bias = pr.qq ? qq.data() : nullptr, p.qq_n = 2;
  std::vector<u16> out(q.size(), 0xffff);
  std::vector<float> lse(size_t(T * pr.hq), NAN);
  p.out = out.data(), p.lse = lse.data();
  p.tokens = T, p.seqs = S, p.q_heads = pr.hq, p.kv_heads = pr.hkv, p.head_dim = D;
  p.num_pages = np, p.page_size = pr.ps, p.max_pages = mb;
  p.q_st = pr.hq * D, p.q_sh = D, p.o_st = pr.hq * D, p.o_sh = D, p.lse_st = pr.hq, p.lse_sh = 1;
  p.k_sp = p.v_sp = pr.ps * pr.hkv * D, p.k_ss = p.v_ss = pr.hkv * D, p.k_sh = p.v_sh = D, p.bt_ss = mb;
  p.scale = 1.0f / std::sqrt(float(D)), p.softcap = pr.softcap, p.window = pr.window, p.vec = 1;
  const long head_groups = (group + kPageMaxGroup - 1) / kPageMaxGroup;
  // Block (s, g, hg): sequence s's last query token (its others are not checked here).
  launch_blocks<D>(S * pr.hkv * head_groups, [&](long b) {
    const long s = b / (pr.hkv * head_groups), g = b / head_groups % pr.hkv, hg = b % head_groups;
    const long h0 = g * group + hg * kPageMaxGroup;
    ragged_decode_tc<Cfg<D, E>>(p, s, pr.n_q, pr.n_q - 1, s * pr.n_q + pr.n_q - 1, g, h0,
                                int(std::min<long>(kPageMaxGroup, group - hg * kPageMaxGroup)));
  });

  Errors e;
  double num = 0, den = 0, lse_err = 0;
  auto f = [](u16 x) { return double(to_f32<E>(x)); };
  for (long s = 0; s < S; ++s)
    for (long h = 0; h < pr.hq; ++h) {
      const long t = s * pr.n_q + pr.n_q - 1, g = h / group, qi = pr.n_q - 1;
      const long n_kv = std::min<long>(lens[size_t(s)], mb * pr.ps), pos = n_kv - pr.n_q + qi, ctx = n_kv - pr.n_q;
      const long end = std::min(pos + 1, n_kv), begin = pr.window > 0 ? std::max<long>(pos - pr.window + 1, 0) : 0;
      auto at = [&](long j) { return ((tables[size_t(s * mb + j / pr.ps)] * pr.ps + j % pr.ps) * pr.hkv + g) * D; };
      std::vector<double> x(size_t(std::max<long>(end, 1)), 0.0), ref(D, 0.0);
      double mx = pr.sinks ? sinks[size_t(h)] : -INFINITY, sum = 0;
      for (long j = begin; j < end; ++j) {
        double d = 0;
        for (int c = 0; c < D; ++c) d += f(q[size_t((t * pr.hq + h) * D + c)]) * f(kc[size_t(at(j) + c)]);
        d *= p.scale;
        if (pr.alibi) d += alibi[size_t(h)] * double(j - ctx);
        if (pr.qq && j - ctx >= 0 && j - ctx < 2 && qi < 2) d += qq[size_t(qi * 2 + j - ctx)];
        if (pr.softcap > 0) d = pr.softcap * std::tanh(d / pr.softcap);
        x[size_t(j)] = d, mx = std::max(mx, d);
      }
      for (long j = begin; j < end; ++j) sum += std::exp(x[size_t(j)] - mx);
      const double total = sum + (pr.sinks ? std::exp(sinks[size_t(h)] - mx) : 0.0);
      for (long j = begin; j < end; ++j)
        for (int c = 0; c < D; ++c) ref[c] += std::exp(x[size_t(j)] - mx) / total * f(vc[size_t(at(j) + c)]);
      const double want_lse = total > 0 ? mx + std::log(total) : -INFINITY, got_lse = lse[size_t(t * pr.hq + h)];
      e.finite = e.finite && (std::isfinite(got_lse) || (got_lse == -INFINITY && want_lse == -INFINITY));
      if (std::isfinite(want_lse)) lse_err = std::max(lse_err, std::abs(got_lse - want_lse));
      for (int c = 0; c < D; ++c) {
        const double got = f(out[size_t((t * pr.hq + h) * D + c)]);
        e.finite = e.finite && std::isfinite(got);
        if (end <= begin) e.empty_zero = e.empty_zero && got == 0.0;
        num += (got - ref[c]) * (got - ref[c]), den += ref[c] * ref[c];
      }
    }
  e.rel = std::sqrt(num / den);
  std::printf("ragged D %d %s hq %ld hkv %ld ps %ld n_q %ld window %ld softcap %g alibi %d sinks %d qq %d: rel-L2 %.3e, "
              "lse max err %.2e\n",
              D, E == Elem::bf16 ? "bf16" : "f16", pr.hq, pr.hkv, pr.ps, pr.n_q, pr.window, pr.softcap, pr.alibi,
              pr.sinks, pr.qq, e.rel, lse_err);
  CHECK(lse_err <= 1e-2);
  return e;
}

}  // namespace

TEST_CASE("the ragged family's one-token blocks on the tensor-core decode match a float64 softmax", "[page][decode]") {
  RaggedProblem p;  // decode, GQA 4, sinks and ALiBi
  p.sinks = true, p.alibi = true;
  check(run_ragged<128, Elem::bf16>(p, 11));
  p = RaggedProblem{};  // the last token of 3-token prefills: causal, a window, qq_bias, a softcap
  p.hq = 6, p.hkv = 1, p.ps = 64, p.contexts = {300, 3, 90}, p.n_q = 3, p.window = 70, p.qq = true, p.softcap = 20;
  check(run_ragged<64, Elem::f16>(p, 12));
  p = RaggedProblem{};  // GQA 1 and a context 0 decode row with a sink (its output 0, lse the sink)
  p.hq = 2, p.hkv = 2, p.ps = 16, p.contexts = {0, 17}, p.sinks = true;
  check(run_ragged<64, Elem::bf16>(p, 13));
}
