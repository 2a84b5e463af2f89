// The CUDA tensor-core paged decode (kernels/ejk/kernels/cuda/page_decode_tc.cuh) run on the
// CPU through cuda_emu/'s stand-in for ptx.cuh, against a float64 softmax on the same 16-bit
// inputs: its block and tile indices, the cp.async ring, the fragment layouts, the per-warp
// softmax and the final merge, where no GPU is. Shapes: GQA 1, 4, 6, 8 and a group wider
// than a block's 16 rows; pages of 5, 16 and 64 shuffled; contexts 0, 1, 17, 75, 300;
// D 64, 80, 128, 256; softcap, window, split-KV partials (merged here by
// merge_states_params.h's rule), empty splits.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "ejk/kernels/cuda/page_decode_tc.cuh"

thread_local Dim3 threadIdx, blockIdx;
namespace ejk::cuda {
alignas(16) unsigned char page_tc_smem[232 * 1024];
}
namespace emu {
unsigned char* smem_base = ejk::cuda::page_tc_smem;
std::barrier<>* block_bar;
std::barrier<>* warp_bar[8];
unsigned slots[8][32][8];
}  // namespace emu

using namespace ejk;
using namespace ejk::cuda;

namespace {

template <int D_, Elem E_> struct Cfg {
  static constexpr Elem E = E_;
  static constexpr int kD = D_;
};

// Blocks one after another, each as kPageThreads threads over shared memory poisoned first.
template <class C> void launch(const PageAttentionParams& p, long blocks) {
  constexpr int kWarps = kPageThreads / 32;
  REQUIRE(size_t(page_tc_smem_bytes(C::kD)) <= sizeof(page_tc_smem));
  for (long b = 0; b < blocks; ++b) {
    std::barrier<> block(kPageThreads);
    std::vector<std::unique_ptr<std::barrier<>>> warps;
    for (int w = 0; w < kWarps; ++w) warps.push_back(std::make_unique<std::barrier<>>(32));
    for (int w = 0; w < kWarps; ++w) emu::warp_bar[w] = warps[size_t(w)].get();
    emu::block_bar = &block;
    std::memset(page_tc_smem, 0x7f, sizeof(page_tc_smem));
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < unsigned(kPageThreads); ++t)
      threads.emplace_back([&, t] {
        threadIdx.x = t, blockIdx.x = unsigned(b);
        page_decode_tc<C>(p);
      });
    for (auto& t : threads) t.join();
  }
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
