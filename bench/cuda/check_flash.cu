// Standalone device check and benchmark of the CUDA flash forward kernels, built by nvcc on
// the GPU machine (bench/cuda/build_and_check.sh) without the project's CMake.
//
//   check_flash check [seed [n [first]]]  randomized feature matrix vs the float64 reference
//                                (n variants from index first)
//   check_flash check-bench [...]  the same problems on every variant the bench times
//   check_flash bench            bf16 grid: B*S = 16k, Hq*D = 2048; JSON lines on stdout
//
// Each case draws fresh random inputs, poisons the outputs with NaN, and fails on any NaN left,
// a rel-L2 error over 1e-2 (bf16/fp16) or a -inf lse mismatch.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "variant_launch.cuh"  // first: see its note on base.h
#include "flash_reference.h"

namespace {
using ejk::cuda::Elem;
using ejk::cuda::FlashFlags;
using namespace ejk::check;

// Every flag, segments included: the segment code is compiled only into variants with the flag,
// so these (both families, per-item and persistent) are the ones the segments problem tests.
constexpr FlashFlags kAll{.causal = true, .window = true, .segments = true, .softcap = true,
                          .sinks = true, .bias = true};

std::vector<Variant> check_variants() {
  return {
      variant<Elem::bf16, 128, 128, 64, kPlain>(),
      variant<Elem::bf16, 128, 128, 64, kCausal>(),
      variant<Elem::bf16, 128, 128, 64, kAll>(),
      variant<Elem::bf16, 64, 128, 64, FlashFlags{.window = true}>(),
      variant<Elem::f16, 64, 64, 32, FlashFlags{.softcap = true, .sinks = true}>(),
      variant<Elem::bf16, 256, 64, 64, kCausal>(),
      variant<Elem::bf16, 256, 64, 32, FlashFlags{.bias = true}>(),
      variant<Elem::bf16, 96, 64, 64, kPlain>(),
      variant<Elem::f16, 128, 64, 128, FlashFlags{.sinks = true}>(),
      variant<Elem::bf16, 32, 64, 64, FlashFlags{.causal = true, .window = true}>(),
      variant<Elem::bf16, 64, 128, 64, kCausal, 16>(),
      variant<Elem::f16, 128, 128, 32, kAll, 32>(),
      variant_sm90<Elem::bf16, 128, 128, 128, kPlain>(),
      variant_sm90<Elem::bf16, 128, 128, 64, kAll>(),
      variant_sm90<Elem::f16, 64, 128, 64, FlashFlags{.causal = true, .window = true}>(),
      variant_sm90<Elem::bf16, 256, 128, 64, kCausal>(),
      variant_sm90<Elem::bf16, 64, 64, 128, FlashFlags{.softcap = true, .sinks = true}>(),
      variant_sm90<Elem::bf16, 192, 128, 64, FlashFlags{.bias = true}>(),
      variant_sm90<Elem::bf16, 128, 128, 128, kCausal, false>(),
      variant_sm90<Elem::f16, 256, 128, 64, kAll>(),
      // three consumer warpgroups (head_dim 64 only), folded and unfolded scale
      variant_sm90<Elem::bf16, 64, 192, 128, FlashFlags{.causal = true, .window = true}>(),
      variant_sm90<Elem::f16, 64, 192, 64, FlashFlags{.causal = true, .softcap = true, .sinks = true}>(),
      // the schedule the default does not give at these tiles: persistent blocks (O straight
      // from registers, the L2-aware causal order) at head_dim 128 and 256
      variant_sm90<Elem::bf16, 128, 128, 128, kCausal, true, 0, ejk::cuda::Sm90Schedule::persistent>(),
      variant_sm90<Elem::bf16, 256, 128, 64, kAll, true, 0, ejk::cuda::Sm90Schedule::persistent>(),
      // block_k other than 64 / 128 (multiples of 16, FA3's tile shapes and their neighbours):
      // 2-stage rings, S = Q K^T at N = 80..224, non-power-of-two TMA boxes and masks, every
      // consumer count, both schedules, every flag
      variant_sm90<Elem::bf16, 128, 128, 176, kPlain>(),
      variant_sm90<Elem::bf16, 128, 128, 176, kCausal, true, 0, ejk::cuda::Sm90Schedule::persistent>(),
      variant_sm90<Elem::f16, 128, 128, 160, kAll>(),
      variant_sm90<Elem::bf16, 128, 128, 80, kCausal>(),
      variant_sm90<Elem::bf16, 256, 128, 80, kCausal>(),
      variant_sm90<Elem::f16, 256, 128, 80, FlashFlags{.window = true, .sinks = true, .bias = true}, false>(),
      variant_sm90<Elem::bf16, 192, 128, 112, kPlain>(),
      variant_sm90<Elem::bf16, 64, 128, 192, FlashFlags{.causal = true, .window = true}>(),
      variant_sm90<Elem::bf16, 64, 64, 224, FlashFlags{.softcap = true}>(),
      variant_sm90<Elem::bf16, 64, 192, 96, kCausal>(),
      // head_dim 128 is by default persistent with an O tile; its per-item twin (O through
      // the Q tile and a TMA store)
      variant_sm90<Elem::bf16, 128, 128, 128, kCausal, true, 0, ejk::cuda::Sm90Schedule::per_item>(),
      // head_dim no multiple of 64: tiles padded to the next one (zero columns from the TMA,
      // not stored): persistent with Q in registers and an O tile, every flag, one block per
      // item (O through the Q tile), persistent without an O tile (O from registers), and
      // tile head_dims 128, 192 and 256
      variant_sm90<Elem::bf16, 96, 128, 128, kPlain>(),
      variant_sm90<Elem::bf16, 96, 128, 128, kCausal>(),
      variant_sm90<Elem::f16, 96, 128, 128, kAll>(),
      variant_sm90<Elem::bf16, 80, 128, 128, kCausal, true, 0, ejk::cuda::Sm90Schedule::per_item>(),
      variant_sm90<Elem::bf16, 112, 128, 128, FlashFlags{.window = true, .softcap = true}>(),
      variant_sm90<Elem::bf16, 160, 128, 64, kAll>(),
      variant_sm90<Elem::bf16, 224, 128, 80, kCausal>(),
      variant_sm90<Elem::f16, 224, 128, 64, kAll, true, 0, ejk::cuda::Sm90Schedule::persistent>(),
      // head_dim below 64: 64-column tiles, the TMA box wider than the tensor (its
      // zero columns skipped by Q K^T, P V at N = 16..48, O stored through a map narrower than
      // its box); two, three and one consumers, both schedules, every flag
      variant_sm90<Elem::bf16, 32, 128, 128, kPlain>(),
      variant_sm90<Elem::bf16, 32, 128, 128, kCausal>(),
      variant_sm90<Elem::f16, 48, 128, 128, kAll>(),
      variant_sm90<Elem::bf16, 48, 192, 128, kCausal>(),
      variant_sm90<Elem::bf16, 16, 192, 128, FlashFlags{.causal = true, .window = true}>(),
      variant_sm90<Elem::bf16, 32, 128, 64, kCausal, true, 0, ejk::cuda::Sm90Schedule::per_item>(),
      variant_sm90<Elem::f16, 16, 64, 128, FlashFlags{.softcap = true, .sinks = true}>(),
  };
}

template <class T> T* to_device(const std::vector<T>& h) {
  if (h.empty()) return nullptr;
  T* d = nullptr;
  CUDA_OK(cudaMalloc(&d, h.size() * sizeof(T)));
  CUDA_OK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

// Device buffers of one problem plus the params that point into them.
struct DeviceRun {
  std::vector<void*> owned;
  ejk::FlashFwdParams p{};
  uint16_t* out = nullptr;
  float* lse = nullptr;
  size_t out_elems = 0, lse_elems = 0;
  ~DeviceRun() {
    for (void* x : owned) cudaFree(x);
  }
  template <class T> T* keep(T* x) {
    if (x) owned.push_back(x);
    return x;
  }
};

void fill_params(DeviceRun& r, const Problem& pr, const HostInputs& in, float scale) {
  const int64_t D = pr.head_dim, Hq = pr.heads_q;
  ejk::FlashFwdParams& p = r.p;
  p.q = r.keep(to_device(in.q));
  p.k = r.keep(to_device(in.k));
  p.v = r.keep(to_device(in.v));
  r.out_elems = pr.total_q() * Hq * D;
  r.lse_elems = pr.varlen ? Hq * pr.total_q() : pr.batch * Hq * pr.seqlen_q;
  CUDA_OK(cudaMalloc(&r.out, r.out_elems * 2));
  CUDA_OK(cudaMalloc(&r.lse, r.lse_elems * 4));
  r.keep(r.out);
  r.keep(r.lse);
  CUDA_OK(cudaMemset(r.out, 0xff, r.out_elems * 2));  // 0xffff: NaN in bf16 and fp16
  CUDA_OK(cudaMemset(r.lse, 0xff, r.lse_elems * 4));  // NaN
  p.out = r.out;
  p.lse = r.lse;
  p.bias = pr.bias ? r.keep(to_device(in.bias)) : nullptr;
  p.q_segment_ids = pr.segments ? r.keep(to_device(in.q_seg)) : nullptr;
  p.kv_segment_ids = pr.segments ? r.keep(to_device(in.kv_seg)) : nullptr;
  p.cu_seqlens_q = pr.varlen ? r.keep(to_device(pr.cu_q)) : nullptr;
  p.cu_seqlens_k = pr.varlen ? r.keep(to_device(pr.cu_k)) : nullptr;
  p.softmax_aux = pr.sinks ? r.keep(to_device(in.aux)) : nullptr;
  p = params_for(pr, p, scale);
  // EJK_CHECK_L2_KV_HEADS=k: the persistent causal order's L2 budget holds k kv heads, so its
  // head groups (flash_fwd_sm90.cuh sm90_causal_order) are small and many on these problems.
  if (const char* k = std::getenv("EJK_CHECK_L2_KV_HEADS"))
    p.l2_kv_bytes = std::atoll(k) * pr.seqlen_k * pr.head_dim * 4;
}

double rel_l2(const double* ref, const double* got, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}
double rel_l2(const std::vector<double>& ref, const std::vector<double>& got) {
  return rel_l2(ref.data(), got.data(), ref.size());
}

// After a failure: the rows whose output is furthest off (relative L2 of the row), with their
// sequence, position in it (and 64-row quarter of a 128-row block), head and lse error, and how
// many rows are off at all, so a race shows which rows (one warpgroup? one item?) it hits.
void print_bad_rows(const Problem& pr, const Reference& ref, const std::vector<double>& out,
                    const std::vector<float>& lse) {
  const int64_t Hq = pr.heads_q, D = pr.head_dim;
  struct Row { double err; int64_t b, s, h; double lse_err; };
  std::vector<Row> rows;
  for (int64_t b = 0; b < pr.batch; ++b)
    for (int64_t s = 0; s < pr.len_q(b); ++s)
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t o = ((pr.q_begin(b) + s) * Hq + h) * D, li = pr.lse_index(b, s, h);
        rows.push_back({rel_l2(&ref.out[o], &out[o], D), b, s, h, double(lse[li]) - ref.lse[li]});
      }
  std::sort(rows.begin(), rows.end(), [](const Row& x, const Row& y) { return x.err > y.err; });
  size_t off = 0;
  while (off < rows.size() && rows[off].err > 3e-2) ++off;
  std::printf("     %zu of %zu rows above 3e-2; worst:", off, rows.size());
  for (size_t i = 0; i < std::min<size_t>(rows.size(), 6); ++i)
    std::printf(" [b%lld s%lld (blk%lld.%lld) h%lld err %.2e lse %+.2e]", (long long)rows[i].b,
                (long long)rows[i].s, (long long)rows[i].s / 128, (long long)(rows[i].s % 128) / 64,
                (long long)rows[i].h, rows[i].err, rows[i].lse_err);
  std::printf("\n");
}

// Runs one problem on one variant; prints a line and returns whether it passed.
bool check_case(const Variant& v, Problem pr, std::mt19937_64& rng) {
  pr.f16 = v.f16;
  pr.head_dim = v.head_dim;
  pr.causal = v.flags.causal, pr.window = v.flags.window, pr.softcap = v.flags.softcap;
  pr.sinks = v.flags.sinks, pr.bias = v.flags.bias;
  // A variant without the segments flag has no segment code (the runtime never gives it ids):
  // the segments problem runs on it without them.
  pr.segments = pr.segments && v.flags.segments;
  // The unnormalized problem also takes a negative scale: the wgmma family folds the scale
  // into the exponent only when it is positive, and must fall back otherwise.
  const float scale = (pr.normalize ? 1.f : -1.f) / std::sqrt(float(pr.head_dim));
  const HostInputs in = make_inputs(pr, rng);
  DeviceRun run;
  fill_params(run, pr, in, scale);
  launch(v, run.p);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint16_t> out_bits(run.out_elems);
  std::vector<float> lse(run.lse_elems);
  CUDA_OK(cudaMemcpy(out_bits.data(), run.out, run.out_elems * 2, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(lse.data(), run.lse, run.lse_elems * 4, cudaMemcpyDeviceToHost));
  const Reference ref = reference(pr, in, scale);

  size_t nan = 0, inf_mismatch = 0;
  std::vector<double> out(out_bits.size()), lse_got, lse_ref;
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = elem_to_f32(pr, out_bits[i]);
    if (std::isnan(out[i])) ++nan;
  }
  for (size_t i = 0; i < lse.size(); ++i) {
    // Dense lse rows past a sequence never exist here (all sequences are full), so every
    // entry was written and must match the reference.
    if (std::isnan(lse[i])) { ++nan; continue; }
    if (std::isinf(ref.lse[i]) || std::isinf(lse[i])) {
      inf_mismatch += (std::isinf(ref.lse[i]) != std::isinf(lse[i]));
      continue;
    }
    lse_got.push_back(lse[i]);
    lse_ref.push_back(ref.lse[i]);
  }
  const double e_out = rel_l2(ref.out, out), e_lse = rel_l2(lse_ref, lse_got);
  const bool ok = nan == 0 && inf_mismatch == 0 && e_out <= 1e-2 && e_lse <= 1e-2;
  std::printf("%-4s %-40s B=%lld Sq=%lld Sk=%lld Hq=%lld Hkv=%lld%s%s%s%s win=%lld,%lld  out=%.2e lse=%.2e nan=%zu inf_mismatch=%zu\n",
              ok ? "PASS" : "FAIL", v.name().c_str(), (long long)pr.batch, (long long)pr.seqlen_q,
              (long long)pr.seqlen_k, (long long)pr.heads_q, (long long)pr.heads_kv,
              pr.varlen ? " varlen" : "", pr.segments ? " segments" : "",
              pr.normalize ? "" : " unnormalized", pr.key_ramp > 0.f ? " ramp" : "",
              (long long)pr.window_left,
              (long long)pr.window_right, e_out, e_lse, nan, inf_mismatch);
  if (!ok) print_bad_rows(pr, ref, out, lse);
  return ok;
}

// Random shapes and options for one variant: odd lengths, Sq != Sk, GQA, broadcast bias,
// segments with padding rows (fully masked), short and long, varlen, unnormalized output, many
// heads x batch.
std::vector<Problem> problems_for(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> len(1, 300), win(0, 90), sinks(1, 3);
  std::uniform_real_distribution<float> cap(3.f, 30.f);
  auto base = [&]() {
    Problem pr;
    pr.batch = 2, pr.heads_q = 4, pr.heads_kv = 2;
    pr.seqlen_q = len(rng), pr.seqlen_k = len(rng);
    pr.window_left = win(rng), pr.window_right = win(rng);
    pr.cap = cap(rng);
    pr.num_sinks = sinks(rng);
    pr.bias_bcast_b = rng() & 1, pr.bias_bcast_h = rng() & 1;
    return pr;
  };
  std::vector<Problem> out;
  out.push_back(base());
  Problem square = base();
  square.seqlen_q = square.seqlen_k = 256 + len(rng);
  square.heads_kv = 1;
  out.push_back(square);
  Problem seg = base();
  seg.segments = true;
  out.push_back(seg);
  Problem unnorm = base();
  unnorm.normalize = false;
  unnorm.bias_bcast_q = true;  // one bias row for every query (sm90a stages it in 1-row boxes)
  out.push_back(unnorm);
  Problem packed = base();
  packed.varlen = true, packed.batch = 3;
  packed.cu_q = {0}, packed.cu_k = {0};
  for (int b = 0; b < 3; ++b) {
    packed.cu_q.push_back(packed.cu_q.back() + len(rng));
    packed.cu_k.push_back(packed.cu_k.back() + len(rng));
  }
  packed.seqlen_q = packed.seqlen_k = 0;
  for (int b = 0; b < 3; ++b) {
    packed.seqlen_q = std::max<int64_t>(packed.seqlen_q, packed.cu_q[b + 1] - packed.cu_q[b]);
    packed.seqlen_k = std::max<int64_t>(packed.seqlen_k, packed.cu_k[b + 1] - packed.cu_k[b]);
  }
  packed.bias_bcast_b = true;  // bias is indexed by sequence position, shared by the pack
  out.push_back(packed);
  // Row maxima that rise by more than the lag from key tile to key tile, more in some rows of a
  // warp than in others: the reference max moves after the first tile and O is rescaled (sm90a
  // softmax_deferred / rescale_o); random logits of unit spread never rise that far. Square, so
  // that causal rows (top-left aligned) reach later tiles; softcap 30, the widest of base()'s,
  // since the cap bounds the rise.
  Problem ramp = base();
  ramp.seqlen_q = ramp.seqlen_k = 256 + len(rng);
  ramp.cap = 30.f;
  ramp.key_ramp = 3.f;
  out.push_back(ramp);
  // 20 (head, sequence) pairs and several q blocks each: the causal order's head groups
  // (with EJK_CHECK_L2_KV_HEADS) and its snake cross groups and batches.
  Problem many = base();
  many.batch = 5, many.heads_q = many.heads_kv = 4;
  many.seqlen_q = many.seqlen_k = 256 + len(rng) / 2;
  out.push_back(many);
  // Long segments shared by q and kv: most warps see tiles of one segment (mask_segments' early
  // exit), the others straddle a boundary or padding rows.
  Problem long_seg = base();
  long_seg.seqlen_q = long_seg.seqlen_k = 256 + len(rng);
  long_seg.segments = true, long_seg.segment_run = 300, long_seg.shared_segments = true;
  out.push_back(long_seg);
  return out;
}

int run_checks(const std::vector<Variant>& variants, uint64_t seed, size_t max_variants,
               size_t first) {
  std::mt19937_64 rng(seed);
  int failed = 0, total = 0;
  for (size_t i = first; i < std::min(first + max_variants, variants.size()); ++i)
    for (const Problem& pr : problems_for(rng)) {
      ++total;
      failed += !check_case(variants[i], pr, rng);
      if (!tile_counter_left_zero()) {
        ++failed;
        std::printf("FAIL %s: the tile counter is not zero after the case\n",
                    variants[i].name().c_str());
      }
    }
  std::printf("check: %d/%d passed (seed %llu)\n", total - failed, total, (unsigned long long)seed);
  return failed == 0 ? 0 : 1;
}

}  // namespace

int run_bench();                                    // bench_flash.cu
std::vector<ejk::check::Variant> bench_variant_list();  // bench_flash.cu

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "check";
  // check-bench: the same problems on every variant the bench times
  if (mode == "check" || mode == "check-bench")
    return run_checks(mode == "check" ? check_variants() : bench_variant_list(),
                      argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 20261121,
                      argc > 3 ? std::strtoull(argv[3], nullptr, 10) : size_t(1) << 20,
                      argc > 4 ? std::strtoull(argv[4], nullptr, 10) : 0);
  if (mode == "bench") return run_bench();
  std::fprintf(stderr, "usage: check_flash check|check-bench [seed [n [first]]] | bench\n");
  return 2;
}
