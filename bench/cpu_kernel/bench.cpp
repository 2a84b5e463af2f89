// Timing of the CPU flash forward kernel on the shapes of docs/perf.md (B=1, H=16, S=2048, D=128,
// causal and not), 2 threads with dynamic scheduling. One line per variant:
//   RESULT <dtype> causal=<0|1> layout=<bshd|bhsd> engine=<amx|fma> bq=<BQ> bk=<BK>
//          ms=<best> quiet=<accepted>/<samples> gflops=<...>
//   usage: cpu_kernel_bench [--all-blocks] [--samples N] [--threads T] [--seq S]
//                           [--layout bshd|bhsd] [--dtype f32|bf16|f16]
// Each sample runs the kernel for about a second and counts only if other processes stayed
// off the CPUs meanwhile (quiet_timer.h); ms is the best accepted sample's time per call.
// --all-blocks also times the other block shapes compiled in (to choose the defaults).
// --layout bhsd stores q/k/v as [B, H, S, D] (torch's layout) and passes them by strides;
// bshd is the library's own [B, S, H, D].
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ejk/kernels/cpu/flash_fwd.h"
#include "problem.h"
#include "quiet_timer.h"

namespace ejk::bench {
namespace {

using cpu::ElemKind;
using cpu::FlashFlags;

struct Variant {
  ElemKind elem;
  bool causal;
  int block_q, block_k;
  bool is_default;
  bool amx;
  TaskFn fn;
};

template <ElemKind K, int BQ, int BK, bool kDefault = false> void add(std::vector<Variant>& out) {
  using Plain = cpu::FlashFwdConfig<K, 128, BQ, BK, FlashFlags{}>;
  using Causal = cpu::FlashFwdConfig<K, 128, BQ, BK, FlashFlags{.causal = true}>;
  out.push_back({K, false, BQ, BK, kDefault, cpu::flash_fwd_uses_amx<Plain>(),
                 &cpu::flash_fwd_tasks<Plain>});
  out.push_back({K, true, BQ, BK, kDefault, cpu::flash_fwd_uses_amx<Causal>(),
                 &cpu::flash_fwd_tasks<Causal>});
}

// The defaults (block_q x block_k = 128 x 64 for every dtype) are what won on this machine;
// docs/design/flash_fwd_cpu.md, "Block shapes", has the numbers of the others.
std::vector<Variant> variants() {
  constexpr auto f32 = ElemKind::f32, bf16 = ElemKind::bf16, f16 = ElemKind::f16;
  std::vector<Variant> v;
  add<f32, 128, 64, true>(v);
  add<bf16, 128, 64, true>(v);
  add<f16, 128, 64, true>(v);
  add<f32, 64, 64>(v);
  add<f32, 64, 32>(v);
  add<f32, 128, 32>(v);
  add<f32, 128, 128>(v);
  add<f32, 256, 64>(v);
  add<bf16, 64, 64>(v);
  add<bf16, 128, 32>(v);
  add<bf16, 128, 128>(v);
  add<bf16, 256, 64>(v);
  return v;
}

const char* elem_name(ElemKind k) {
  return k == ElemKind::f32 ? "f32" : k == ElemKind::bf16 ? "bf16" : "f16";
}

double time_ms(const Variant& var, const FlashFwdParams& p, int threads) {
  auto t0 = std::chrono::steady_clock::now();
  run_threaded(var.fn, p, var.block_q, threads);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace
}  // namespace ejk::bench

int main(int argc, char** argv) {
  using namespace ejk::bench;
  bool all_blocks = false, head_major = false;
  int samples = 3, threads = 2;
  int64_t seq = 2048;
  std::string only_dtype;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--all-blocks")) all_blocks = true;
    else if (!std::strcmp(argv[i], "--samples") && has_value) samples = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--threads") && has_value) threads = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--seq") && has_value) seq = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--layout") && has_value) head_major = !std::strcmp(argv[++i], "bhsd");
    else if (!std::strcmp(argv[i], "--dtype") && has_value) only_dtype = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: %s [--all-blocks] [--samples N] [--threads T] [--seq S] [--layout bshd|bhsd] "
                   "[--dtype f32|bf16|f16]\n",
                   argv[0]);
      return 2;
    }
  }
  std::mt19937_64 rng(std::random_device{}());
  for (const Variant& var : variants()) {
    if (!var.is_default && !all_blocks) continue;
    if (!only_dtype.empty() && only_dtype != elem_name(var.elem)) continue;
    Problem pb;
    pb.dtype = var.elem == ejk::cpu::ElemKind::f32    ? ejk::DType::f32
               : var.elem == ejk::cpu::ElemKind::bf16 ? ejk::DType::bf16
                                                      : ejk::DType::f16;
    pb.batch = 1, pb.heads_q = pb.heads_kv = 16, pb.seqlen_q = pb.seqlen_k = seq, pb.head_dim = 128;
    pb.causal = var.causal;
    pb.head_major = head_major;
    Inputs in(pb, rng);
    const double first_ms = time_ms(var, in.params(), threads);  // warm-up: pages, caches
    const QuietTime t =
        time_quietly([&] { run_threaded(var.fn, in.params(), var.block_q, threads); }, first_ms,
                     samples);
    // Useful flops: 2 products of 2*S*S*D each; causal does about half.
    double flops = 4.0 * double(pb.heads_q) * double(seq) * double(seq) * 128.0;
    if (var.causal) flops *= 0.5;
    std::printf("RESULT %s causal=%d layout=%s engine=%s bq=%d bk=%d ms=%.2f quiet=%d/%d "
                "gflops=%.1f%s\n",
                elem_name(var.elem), var.causal, head_major ? "bhsd" : "bshd",
                var.amx ? "amx" : "fma", var.block_q, var.block_k, t.ms, t.accepted, t.samples,
                flops / t.ms * 1e-6, var.is_default ? " default" : "");
    std::fflush(stdout);
  }
  return 0;
}
