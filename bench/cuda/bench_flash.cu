// Benchmark half of check_flash: the bf16 grid of docs/perf.md (B*S = 16k tokens, Hq*D = 2048,
// S in 1k..16k, D in {64, 128, 256}, causal and not), every tile config of bench_variants()
// per shape. Prints one JSON line per (shape, variant) with the median of CUDA-event timings
// and the FLOP rate counted as peers.py counts it (exact unmasked pairs when causal).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "variant_launch.cuh"

namespace {
using namespace ejk::check;

// The sm_90a family's default keys' tile configs (by_default schedule: flash_fwd_traits.cuh)
// and the alternatives that were the best in some row of a measurement, so that the heuristic's
// choices can be re-checked (docs/design/flash_fwd_cuda.md, "Tile shapes").
std::vector<Variant> bench_variants() {
  constexpr ejk::cuda::Sm90Schedule kPerItem = ejk::cuda::Sm90Schedule::per_item;
  constexpr ejk::cuda::Sm90Schedule kPersist = ejk::cuda::Sm90Schedule::persistent;
  constexpr ejk::cuda::Sm90Schedule kByDefault = ejk::cuda::Sm90Schedule::by_default;
  constexpr ejk::cuda::Sm90QOperand kQSmem = ejk::cuda::Sm90QOperand::smem;
  constexpr ejk::cuda::Sm90QOperand kQRegs = ejk::cuda::Sm90QOperand::registers;
  constexpr FlashFlags kWindowCap{.causal = true, .window = true, .softcap = true};
  constexpr FlashFlags kSeg{.segments = true}, kCausalSeg{.causal = true, .segments = true};
  constexpr FlashFlags kBias{.bias = true}, kCausalBias{.causal = true, .bias = true};
  return {
      variant_sm90<Elem::bf16, 64, 128, 128, kPlain>(),  variant_sm90<Elem::bf16, 64, 128, 128, kCausal>(),
      variant_sm90<Elem::bf16, 64, 192, 128, kPlain>(),  variant_sm90<Elem::bf16, 64, 192, 128, kCausal>(),
      variant_sm90<Elem::bf16, 128, 128, 128, kPlain>(), variant_sm90<Elem::bf16, 128, 128, 128, kCausal>(),
      variant_sm90<Elem::bf16, 256, 128, 64, kPlain>(),  variant_sm90<Elem::bf16, 256, 128, 64, kCausal>(),
      // without ping-pong: within noise of the default
      variant_sm90<Elem::bf16, 256, 128, 64, kPlain, false>(),  variant_sm90<Elem::bf16, 256, 128, 64, kCausal, false>(),
      // other block_k (FA3's tile shapes: 128 x 176 at head_dim 128, 128 x 80 at 256; 2-stage
      // rings) and neighbours
      variant_sm90<Elem::bf16, 64, 128, 192, kPlain>(),  variant_sm90<Elem::bf16, 64, 128, 192, kCausal>(),
      variant_sm90<Elem::bf16, 64, 192, 96, kCausal>(),
      variant_sm90<Elem::bf16, 128, 128, 160, kPlain>(), variant_sm90<Elem::bf16, 128, 128, 160, kCausal>(),
      variant_sm90<Elem::bf16, 128, 128, 176, kPlain>(), variant_sm90<Elem::bf16, 128, 128, 176, kCausal>(),
      variant_sm90<Elem::bf16, 128, 128, 192, kPlain>(),
      variant_sm90<Elem::bf16, 256, 128, 80, kPlain>(),  variant_sm90<Elem::bf16, 256, 128, 80, kCausal>(),
      variant_sm90<Elem::bf16, 256, 128, 80, kPlain, false>(),  variant_sm90<Elem::bf16, 256, 128, 80, kCausal, false>(),
      // head_dim 128 bk144 / causal bk192, head_dim 64 bq192 with bk < 128
      variant_sm90<Elem::bf16, 64, 192, 112, kPlain>(), variant_sm90<Elem::bf16, 64, 192, 112, kCausal>(),
      variant_sm90<Elem::bf16, 64, 192, 80, kCausal>(),
      variant_sm90<Elem::bf16, 128, 128, 144, kPlain>(), variant_sm90<Elem::bf16, 128, 128, 144, kCausal>(),
      variant_sm90<Elem::bf16, 128, 128, 192, kCausal>(),
      // the other schedule of each heuristic default (persistent with an O tile at
      // head_dim <= 128 where it fits; one block per item at 256 and at 128 x 176 / 192)
      variant_sm90<Elem::bf16, 64, 192, 128, kPlain, true, 0, kPerItem>(),
      variant_sm90<Elem::bf16, 64, 192, 128, kCausal, true, 0, kPerItem>(),
      variant_sm90<Elem::bf16, 64, 128, 128, kCausal, true, 0, kPerItem>(),
      variant_sm90<Elem::bf16, 128, 128, 128, kPlain, true, 0, kPerItem>(),
      variant_sm90<Elem::bf16, 128, 128, 128, kCausal, true, 0, kPerItem>(),
      variant_sm90<Elem::bf16, 128, 128, 160, kPlain, true, 0, kPerItem>(),
      variant_sm90<Elem::bf16, 128, 128, 160, kCausal, true, 0, kPerItem>(),
      variant_sm90<Elem::bf16, 128, 128, 176, kPlain, true, 0, kPersist>(),  // no O tile
      variant_sm90<Elem::bf16, 256, 128, 80, kPlain, true, 0, kPersist>(),
      variant_sm90<Elem::bf16, 256, 128, 80, kCausal, true, 0, kPersist>(),
      // three consumers without the turn ring (the ring is the default)
      variant_sm90<Elem::bf16, 64, 192, 128, kPlain, false>(), variant_sm90<Elem::bf16, 64, 192, 128, kCausal, false>(),
      // the other Q operand of the defaults near the rule: shared memory where the default
      // holds Q in registers, registers at 128 x 144 (estimate inside the headroom)
      variant_sm90<Elem::bf16, 64, 128, 128, kPlain, true, 0, kByDefault, kQSmem>(),
      variant_sm90<Elem::bf16, 64, 128, 128, kCausal, true, 0, kByDefault, kQSmem>(),
      variant_sm90<Elem::bf16, 128, 128, 128, kPlain, true, 0, kByDefault, kQSmem>(),
      variant_sm90<Elem::bf16, 128, 128, 128, kCausal, true, 0, kByDefault, kQSmem>(),
      variant_sm90<Elem::bf16, 128, 128, 144, kPlain, true, 0, kByDefault, kQRegs>(),
      variant_sm90<Elem::bf16, 128, 128, 144, kCausal, true, 0, kByDefault, kQRegs>(),
      // the GQA 32:8 + window 1024 + softcap 30 rows (EJK_BENCH_WINDOW=1): the heuristic's
      // key at head_dim 64 from 2k, and the 128 x 128 tile
      variant_sm90<Elem::bf16, 64, 192, 128, kWindowCap>(),
      variant_sm90<Elem::bf16, 64, 128, 128, kWindowCap>(),
      // head_dim 96 and 160 (EJK_BENCH_D): padded wgmma tiles (the default keys') against the
      // sm80 family, which sm90a keys of these head_dims ran before
      variant_sm90<Elem::bf16, 96, 128, 128, kPlain>(),  variant_sm90<Elem::bf16, 96, 128, 128, kCausal>(),
      variant<Elem::bf16, 96, 128, 64, kPlain>(),        variant<Elem::bf16, 96, 128, 64, kCausal>(),
      variant_sm90<Elem::bf16, 160, 128, 64, kPlain>(),  variant_sm90<Elem::bf16, 160, 128, 64, kCausal>(),
      variant<Elem::bf16, 160, 128, 32, kPlain>(),       variant<Elem::bf16, 160, 128, 32, kCausal>(),
      // their other tiles: wider key tiles at 96 (d128's 128 x 192 and
      // neighbours), d256's 128 x 80 and neighbours at 160; 80 and 112 at the default
      variant_sm90<Elem::bf16, 96, 128, 160, kPlain>(),  variant_sm90<Elem::bf16, 96, 128, 160, kCausal>(),
      variant_sm90<Elem::bf16, 96, 128, 192, kPlain>(),  variant_sm90<Elem::bf16, 96, 128, 192, kCausal>(),
      variant_sm90<Elem::bf16, 96, 128, 128, kCausal, true, 0, kPerItem>(),
      variant_sm90<Elem::bf16, 160, 128, 80, kPlain>(),  variant_sm90<Elem::bf16, 160, 128, 80, kCausal>(),
      variant_sm90<Elem::bf16, 160, 128, 96, kPlain>(),  variant_sm90<Elem::bf16, 160, 128, 96, kCausal>(),
      variant_sm90<Elem::bf16, 160, 128, 112, kPlain>(), variant_sm90<Elem::bf16, 160, 128, 112, kCausal>(),
      variant_sm90<Elem::bf16, 80, 128, 128, kPlain>(),  variant_sm90<Elem::bf16, 80, 128, 128, kCausal>(),
      variant_sm90<Elem::bf16, 112, 128, 128, kPlain>(), variant_sm90<Elem::bf16, 112, 128, 128, kCausal>(),
      // head_dim 192 and 224 (tiles of 192 and 256 columns): 128 x 64 (the fallback rule's)
      // against 128 x 80 (d256's) and 128 x 96
      variant_sm90<Elem::bf16, 192, 128, 64, kPlain>(),  variant_sm90<Elem::bf16, 192, 128, 64, kCausal>(),
      variant_sm90<Elem::bf16, 192, 128, 80, kPlain>(),  variant_sm90<Elem::bf16, 192, 128, 80, kCausal>(),
      variant_sm90<Elem::bf16, 192, 128, 96, kPlain>(),  variant_sm90<Elem::bf16, 192, 128, 96, kCausal>(),
      variant_sm90<Elem::bf16, 224, 128, 64, kPlain>(),  variant_sm90<Elem::bf16, 224, 128, 64, kCausal>(),
      variant_sm90<Elem::bf16, 224, 128, 80, kPlain>(),  variant_sm90<Elem::bf16, 224, 128, 80, kCausal>(),
      // head_dim 32 and 48: the wgmma family on 64-column tiles (TMA boxes wider
      // than the tensor), two and three consumers, against the sm80 family they ran before
      variant_sm90<Elem::bf16, 32, 128, 128, kPlain>(),  variant_sm90<Elem::bf16, 32, 128, 128, kCausal>(),
      variant_sm90<Elem::bf16, 32, 192, 128, kPlain>(),  variant_sm90<Elem::bf16, 32, 192, 128, kCausal>(),
      variant<Elem::bf16, 32, 128, 128, kPlain>(),       variant<Elem::bf16, 32, 128, 128, kCausal>(),
      variant<Elem::bf16, 32, 128, 64, kPlain>(),        variant<Elem::bf16, 32, 128, 64, kCausal>(),
      variant_sm90<Elem::bf16, 48, 128, 128, kPlain>(),  variant_sm90<Elem::bf16, 48, 128, 128, kCausal>(),
      variant_sm90<Elem::bf16, 48, 192, 128, kPlain>(),  variant_sm90<Elem::bf16, 48, 192, 128, kCausal>(),
      variant<Elem::bf16, 48, 128, 128, kPlain>(),       variant<Elem::bf16, 48, 128, 128, kCausal>(),
      // the other schedules near the rules: one block per item for d32 causal at 16k (the rule
      // has it at 64 only), persistent blocks for d192's 128 x 96 (causal 1k: 0.97x cuDNN per item)
      variant_sm90<Elem::bf16, 32, 192, 128, kCausal, true, 0, kPerItem>(),
      variant_sm90<Elem::bf16, 192, 128, 96, kPlain, true, 0, kPersist>(),
      variant_sm90<Elem::bf16, 192, 128, 96, kCausal, true, 0, kPersist>(),
      // segment ids (EJK_BENCH_SEGMENTS=1: n equal segments per sequence) on the
      // heuristic's tiles at head_dim 64 and 128
      variant_sm90<Elem::bf16, 64, 192, 128, kSeg>(),  variant_sm90<Elem::bf16, 64, 192, 128, kCausalSeg>(),
      variant_sm90<Elem::bf16, 128, 128, 128, kSeg>(), variant_sm90<Elem::bf16, 128, 128, 128, kCausalSeg>(),
      // a bias tensor (EJK_BENCH_BIAS=1): 2 bytes per (query, key) pair; at head_dim 64 the
      // heuristic's tile for extras (128 x 128) and the plain keys' (192 x 128)
      variant_sm90<Elem::bf16, 64, 128, 128, kBias>(),  variant_sm90<Elem::bf16, 64, 128, 128, kCausalBias>(),
      variant_sm90<Elem::bf16, 64, 192, 128, kBias>(),  variant_sm90<Elem::bf16, 64, 192, 128, kCausalBias>(),
      variant_sm90<Elem::bf16, 128, 128, 128, kBias>(), variant_sm90<Elem::bf16, 128, 128, 128, kCausalBias>(),
  };
}

// Normal-ish random bf16 from a hash of the index: no host generation of 100M+ elements.
__global__ void fill_random(uint16_t* x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 0x9E3779B9u ^ seed;
    h ^= h >> 16; h *= 0x85EBCA6Bu; h ^= h >> 13; h *= 0xC2B2AE35u; h ^= h >> 16;
    const float u = (h & 0xffffff) * (1.f / 16777216.f) * 2.f - 1.f;  // uniform [-1, 1)
    x[i] = uint16_t(__float_as_uint(u * 1.7f) >> 16);                 // ~unit variance
  }
}

uint16_t* random_tensor(size_t n, uint32_t seed) {
  uint16_t* d = nullptr;
  CUDA_OK(cudaMalloc(&d, n * 2));
  fill_random<<<1024, 256>>>(d, n, seed);
  CUDA_OK(cudaGetLastError());
  return d;
}

// The peers are timed with triton.testing.do_bench (peers.py), so ours are timed the same way:
// about 25 ms of warm-up and 100 ms of repetitions (counts from a 5-launch estimate), the L2
// cleared before every repetition by zeroing a 256 MB buffer, CUDA events around the launch
// alone, the median. EJK_BENCH_FLUSH=0: back-to-back launches with no clearing (ours moved
// -3..+3% between the two, cuDNN -5..+2%; docs/design/flash_fwd_cuda.md, "How it is measured").
// A 0/1 environment switch; unset or empty: fallback.
bool env_flag(const char* var, bool fallback) {
  const char* v = std::getenv(var);
  return v == nullptr || *v == '\0' ? fallback : std::atoi(v) != 0;
}

bool flush_l2() { return env_flag("EJK_BENCH_FLUSH", true); }

float median_ms(const Variant& v, const ejk::FlashFwdParams& p) {
  static void* scratch = nullptr;  // do_bench's cache-clearing buffer: 256 MB
  constexpr size_t kScratch = size_t(256) << 20;
  static const bool flush = flush_l2();
  if (flush && scratch == nullptr) CUDA_OK(cudaMalloc(&scratch, kScratch));
  auto clear = [&] {
    if (flush) CUDA_OK(cudaMemsetAsync(scratch, 0, kScratch));
  };
  const Prepared pre = prepare(v, p);
  cudaEvent_t a, b;
  CUDA_OK(cudaEventCreate(&a));
  CUDA_OK(cudaEventCreate(&b));
  launch(v, p, pre);
  CUDA_OK(cudaEventRecord(a));
  for (int i = 0; i < 5; ++i) {
    clear();
    launch(v, p, pre);
  }
  CUDA_OK(cudaEventRecord(b));
  CUDA_OK(cudaEventSynchronize(b));
  float est = 0;
  CUDA_OK(cudaEventElapsedTime(&est, a, b));
  est = std::max(est / 5, 1e-3f);
  const int warmup = std::max(1, int(25 / est)), reps = std::max(1, int(100 / est));
  std::vector<cudaEvent_t> starts(reps), ends(reps);
  for (int i = 0; i < reps; ++i) {
    CUDA_OK(cudaEventCreate(&starts[i]));
    CUDA_OK(cudaEventCreate(&ends[i]));
  }
  for (int i = 0; i < warmup; ++i) launch(v, p, pre);
  for (int i = 0; i < reps; ++i) {
    clear();
    CUDA_OK(cudaEventRecord(starts[i]));
    launch(v, p, pre);
    CUDA_OK(cudaEventRecord(ends[i]));
  }
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> t(reps);
  for (int i = 0; i < reps; ++i) {
    CUDA_OK(cudaEventElapsedTime(&t[i], starts[i], ends[i]));
    CUDA_OK(cudaEventDestroy(starts[i]));
    CUDA_OK(cudaEventDestroy(ends[i]));
  }
  CUDA_OK(cudaEventDestroy(a));
  CUDA_OK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// EJK_BENCH_L2=a,b,...: time each variant with FlashFwdParams::l2_kv_bytes = a, b, ... in turn
// (the persistent causal order's head-group budget; 0 = the kernel's default), for A/B runs of
// the order inside one binary. EJK_BENCH_VARIANTS=s1,s2: only variants whose name contains one
// (s1$: whose name ends with s1).
std::vector<int64_t> l2_budgets() {
  std::vector<int64_t> out;
  const char* e = std::getenv("EJK_BENCH_L2");
  for (const char* c = e; c && *c;) {
    out.push_back(std::atoll(c));
    c = std::strchr(c, ',');
    c = c ? c + 1 : nullptr;
  }
  if (out.empty()) out.push_back(0);
  return out;
}

// EJK_BENCH_SUSTAIN=seconds: instead of the do_bench protocol, launch back to back for that
// long (the chip reaches its power cap after ~1 s) and report the mean time per launch.
double sustain_seconds() {
  const char* e = std::getenv("EJK_BENCH_SUSTAIN");
  return e && *e ? std::atof(e) : 0.0;
}

float sustained_ms(const Variant& v, const ejk::FlashFwdParams& p, double seconds) {
  const Prepared pre = prepare(v, p);
  for (int i = 0; i < 10; ++i) launch(v, p, pre);
  CUDA_OK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  CUDA_OK(cudaEventCreate(&a));
  CUDA_OK(cudaEventCreate(&b));
  const auto t0 = std::chrono::steady_clock::now();
  CUDA_OK(cudaEventRecord(a));
  long n = 0;
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
    for (int i = 0; i < 50; ++i) launch(v, p, pre);
    n += 50;
    CUDA_OK(cudaDeviceSynchronize());
  }
  CUDA_OK(cudaEventRecord(b));
  CUDA_OK(cudaEventSynchronize(b));
  float ms = 0;
  CUDA_OK(cudaEventElapsedTime(&ms, a, b));
  CUDA_OK(cudaEventDestroy(a));
  CUDA_OK(cudaEventDestroy(b));
  return ms / float(n);
}

// The timer for every variant of the run: do_bench's protocol, or EJK_BENCH_SUSTAIN seconds.
float time_ms(const Variant& v, const ejk::FlashFwdParams& p) {
  static const double sustain = sustain_seconds();
  return sustain > 0 ? sustained_ms(v, p, sustain) : median_ms(v, p);
}

bool variant_selected(const Variant& v) {
  const char* e = std::getenv("EJK_BENCH_VARIANTS");
  if (e == nullptr || *e == '\0') return true;
  const std::string name = v.name(), list = e;
  for (size_t a = 0; a <= list.size();) {
    const size_t b = std::min(list.find(',', a), list.size());
    std::string want = list.substr(a, b - a);
    // A trailing '$' anchors the token at the end of the name (one variant, not its twins).
    const bool anchored = !want.empty() && want.back() == '$';
    if (anchored) want.pop_back();
    const size_t at = name.rfind(want);
    if (b > a && at != std::string::npos && (!anchored || at + want.size() == name.size()))
      return true;
    a = b + 1;
  }
  return false;
}

#if defined(EJK_SM90_PROBE)
// Probe builds: one more launch, then where the time went. Per block (globaltimer): the share
// of SM-time with no block (launch gaps between the blocks of an SM, and the tail), and the
// mean gap between consecutive blocks of one SM. Per item and consumer warpgroup (clock64):
// the cycles of each Sm90ProbePhase (the tile loop per tile).
void print_probe(const Variant& v, const ejk::FlashFwdParams& p) {
  using namespace ejk::cuda;
  std::vector<unsigned long long> t(3 * kProbeBlocks, 0);
  unsigned long long ph[kProbeCount] = {};
  CUDA_OK(cudaMemcpyToSymbol(ejk::cuda::ejk_sm90_probe, t.data(), t.size() * 8));
  CUDA_OK(cudaMemcpyToSymbol(ejk::cuda::ejk_sm90_phases, ph, sizeof(ph)));
  launch(v, p);
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpyFromSymbol(t.data(), ejk::cuda::ejk_sm90_probe, t.size() * 8));
  CUDA_OK(cudaMemcpyFromSymbol(ph, ejk::cuda::ejk_sm90_phases, sizeof(ph)));
  struct Span { double start, end; };
  std::vector<std::vector<Span>> per_sm(256);
  double t0 = 1e300, t1 = 0;
  size_t blocks = 0;
  for (int b = 0; b < kProbeBlocks; ++b) {
    if (t[3 * b + 1] == 0) continue;
    const Span s{double(t[3 * b]), double(t[3 * b + 1])};
    per_sm[t[3 * b + 2] & 255].push_back(s);
    t0 = std::min(t0, s.start), t1 = std::max(t1, s.end), ++blocks;
  }
  if (blocks == 0) return;
  double busy = 0, gaps = 0;
  size_t n_gaps = 0, sms = 0;
  for (auto& spans : per_sm) {
    if (spans.empty()) continue;
    ++sms;
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.start < b.start; });
    for (size_t i = 0; i < spans.size(); ++i) {
      busy += spans[i].end - spans[i].start;
      if (i > 0) gaps += spans[i].start - spans[i - 1].end, ++n_gaps;
    }
  }
  const double items = std::max(1.0, double(ph[kProbeItems]));
  const double tiles = std::max(1.0, double(ph[kProbeTiles]));
  std::printf(", \"probe\": {\"blocks\": %zu, \"sms\": %zu, \"span_us\": %.1f, \"idle_pct\": %.2f, "
              "\"gap_ns\": %.0f, \"q_wait\": %.0f, \"k_wait\": %.0f, \"turn\": %.0f, \"s0\": %.0f, "
              "\"loop_per_tile\": %.0f, \"finish\": %.0f, \"stage\": %.0f, \"store\": %.0f, "
              "\"tiles_per_item\": %.2f}",
              blocks, sms, (t1 - t0) / 1e3, 100.0 * (1.0 - busy / (double(sms) * (t1 - t0))),
              n_gaps ? gaps / n_gaps : 0.0, ph[kProbeQWait] / items, ph[kProbeKWait] / items,
              ph[kProbeTurn] / items, ph[kProbeS0] / items, ph[kProbeLoop] / tiles,
              ph[kProbeFinish] / items, ph[kProbeStage] / items, ph[kProbeStore] / items,
              tiles / items);
}
#endif

// One benchmark shape: the grid (Hq = Hkv = 2048 / D, no window, no softcap) or its
// GQA + window + softcap row.
struct Shape {
  int64_t S, D;
  bool causal;
  int64_t hq = 0, hkv = 0;  // 0: 2048 / D
  int64_t window_left = -1, window_right = -1;  // -1: no window
  float softcap = 0.f;                          // 0: none
  // Segment ids: this many equal segments per sequence (0: none). TFLOP/s count the pairs the
  // other masks keep: the kernels visit the same tiles either way, so rows compare by time.
  int64_t segments = 0;
  bool bias = false;  // a random [B, Hq, S, S] bias
  bool window() const { return window_left >= 0; }
};

// Visible (query, key) pairs of one head, as peers.py counts them (mask.h's rules: causal keys
// k <= q, window keys q - left <= k <= q + right).
double visible_pairs(const Shape& sh) {
  double pairs = 0;
  for (int64_t q = 0; q < sh.S; ++q) {
    int64_t lo = 0, hi = sh.causal ? q : sh.S - 1;
    if (sh.window()) lo = std::max<int64_t>(lo, q - sh.window_left), hi = std::min(hi, q + sh.window_right);
    pairs += double(std::max<int64_t>(0, hi - lo + 1));
  }
  return pairs;
}

bool variant_fits(const Variant& v, const Shape& sh) {
  return v.head_dim == sh.D && v.flags.causal == sh.causal && v.flags.window == sh.window() &&
         v.flags.softcap == (sh.softcap > 0.f) && v.flags.segments == (sh.segments > 0) && !v.flags.sinks &&
         v.flags.bias == sh.bias && variant_selected(v);
}

void bench_shape(const std::vector<Variant>& vs, const Shape& sh) {
  // EJK_BENCH_TOKENS=n: B*S = n instead of the grid's 16k (shapes beyond the grid)
  const char* tokens = std::getenv("EJK_BENCH_TOKENS");
  const int64_t S = sh.S, D = sh.D;
  const int64_t B = std::max<int64_t>(1, (tokens && *tokens ? std::atoll(tokens) : 16384) / S);
  const int64_t Hq = sh.hq ? sh.hq : 2048 / D, Hkv = sh.hkv ? sh.hkv : Hq;
  const size_t nq = size_t(B) * S * Hq * D, nkv = size_t(B) * S * Hkv * D;
  uint16_t *q = random_tensor(nq, 1), *k = random_tensor(nkv, 2), *v = random_tensor(nkv, 3), *o = nullptr;
  float* lse = nullptr;
  CUDA_OK(cudaMalloc(&o, nq * 2));
  CUDA_OK(cudaMalloc(&lse, size_t(B) * Hq * S * 4));
  int32_t* seg = nullptr;  // one id array for q and kv: sh.segments equal segments per sequence
  if (sh.segments > 0) {
    std::vector<int32_t> ids(size_t(B) * S);
    const int64_t len = (S + sh.segments - 1) / sh.segments;
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(int64_t(i) % S / len);
    CUDA_OK(cudaMalloc(&seg, ids.size() * 4));
    CUDA_OK(cudaMemcpy(seg, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
  }
  uint16_t* bias = sh.bias ? random_tensor(size_t(B) * Hq * S * S, 4) : nullptr;
  ejk::FlashFwdParams p{};
  p.q = q, p.k = k, p.v = v, p.out = o, p.lse = lse;
  p.bias = bias;
  p.bias_stride_b = Hq * S * S, p.bias_stride_h = S * S, p.bias_stride_q = S;
  p.batch = B, p.seqlen_q = p.seqlen_k = S, p.heads_q = Hq, p.heads_kv = Hkv, p.head_dim = D;
  p.q_stride_b = p.o_stride_b = S * Hq * D;
  p.k_stride_b = p.v_stride_b = S * Hkv * D;
  p.q_stride_s = p.o_stride_s = Hq * D;
  p.k_stride_s = p.v_stride_s = Hkv * D;
  p.q_stride_h = p.k_stride_h = p.v_stride_h = p.o_stride_h = D;
  p.lse_stride_b = Hq * S, p.lse_stride_h = S;
  p.scale = 1.f / std::sqrt(float(D));
  p.mask.causal = sh.causal;
  if (sh.window()) p.mask.window_left = sh.window_left, p.mask.window_right = sh.window_right;
  p.softcap = sh.softcap;
  p.q_segment_ids = p.kv_segment_ids = seg;
  p.q_seg_stride_b = p.kv_seg_stride_b = S;
  p.normalize_output = 1;
  const double flops = 4.0 * B * Hq * visible_pairs(sh) * D;
  const std::vector<int64_t> budgets = l2_budgets();
  for (const Variant& var : vs) {
    if (!variant_fits(var, sh)) continue;
    for (size_t i = 0; i < budgets.size(); ++i) {
      if (i > 0 && !(var.persistent && sh.causal)) break;  // the budget changes nothing else
      p.l2_kv_bytes = budgets[i];
      const float ms = time_ms(var, p);
      std::printf("{\"kernel\": \"ejk\", \"variant\": \"%s\", \"b\": %lld, \"h\": %lld, \"s\": %lld, \"d\": %lld, \"causal\": %s, \"ms\": %.4f, \"tflops\": %.1f",
                  var.name().c_str(), (long long)B, (long long)Hq, (long long)S, (long long)D,
                  sh.causal ? "true" : "false", ms, flops / ms / 1e9);
      if (Hkv != Hq) std::printf(", \"hkv\": %lld", (long long)Hkv);
      if (sh.window())
        std::printf(", \"window\": [%lld, %lld]", (long long)sh.window_left, (long long)sh.window_right);
      if (sh.softcap > 0.f) std::printf(", \"softcap\": %g", sh.softcap);
      if (sh.segments > 0) std::printf(", \"segments\": %lld", (long long)sh.segments);
      if (sh.bias) std::printf(", \"bias\": true");
      if (budgets.size() > 1 || budgets[0] != 0) std::printf(", \"l2_kv_bytes\": %lld", (long long)budgets[i]);
#if defined(EJK_SM90_PROBE)
      print_probe(var, p);
#endif
      std::printf("}\n");
    }
  }
  std::fflush(stdout);
  for (void* x : {(void*)q, (void*)k, (void*)v, (void*)o, (void*)lse, (void*)seg, (void*)bias})
    CUDA_OK(cudaFree(x));
}

}  // namespace

// EJK_BENCH_D=128 / EJK_BENCH_S=4096 / EJK_BENCH_CAUSAL=1: one head dim, sequence length or
// mask only (A/B runs that spend the device time on the rows they compare).
bool selected(const char* var, int64_t value) {
  const char* v = std::getenv(var);
  return v == nullptr || *v == '\0' || std::atoll(v) == value;
}

std::vector<Variant> bench_variant_list() { return bench_variants(); }

// The rows of one feature (segment ids, bias): 1k, 4k and 16k of each head_dim and mask, the
// feature set on the shape by `with`.
template <class With>
void bench_feature_rows(const std::vector<Variant>& vs, const std::vector<int64_t>& dims, With with) {
  for (int64_t D : dims)
    for (bool causal : {false, true})
      for (int64_t S : {1024, 4096, 16384})
        if (selected("EJK_BENCH_S", S) && selected("EJK_BENCH_CAUSAL", causal)) {
          Shape sh{S, D, causal};
          with(sh);
          bench_shape(vs, sh);
        }
}

// EJK_BENCH_GRID=0 skips the grid; EJK_BENCH_WINDOW=1 adds the GQA 32:8 rows with a
// causal window of 1024 and softcap 30 at head_dim 64, 4k..16k (the FlexAttention comparison);
// EJK_BENCH_SEGMENTS=n adds rows with segment ids, n equal segments per sequence (1: the mask's
// cost where every tile lies in one segment), on the variants with the flag; EJK_BENCH_BIAS=1
// rows with a random [B, Hq, S, S] bias (8.6 GB at 16k) on the bias variants.
int run_bench() {
  const std::vector<Variant> vs = bench_variants();
  // The grid's head_dims, or the one EJK_BENCH_D names (32-224 have variants too).
  const char* only_d = std::getenv("EJK_BENCH_D");
  std::vector<int64_t> dims = {64, 128, 256};
  if (only_d != nullptr && *only_d != '\0') dims = {std::atoll(only_d)};
  if (env_flag("EJK_BENCH_GRID", true))
    for (int64_t D : dims)
      for (bool causal : {false, true})
        for (int64_t S : {1024, 2048, 4096, 8192, 16384})
          if (selected("EJK_BENCH_S", S) && selected("EJK_BENCH_CAUSAL", causal))
            bench_shape(vs, Shape{S, D, causal});
  const char* segments = std::getenv("EJK_BENCH_SEGMENTS");
  const int64_t n_segments = segments != nullptr ? std::atoll(segments) : 0;
  if (n_segments > 0) bench_feature_rows(vs, dims, [&](Shape& sh) { sh.segments = n_segments; });
  if (env_flag("EJK_BENCH_BIAS", false)) bench_feature_rows(vs, dims, [](Shape& sh) { sh.bias = true; });
  if (env_flag("EJK_BENCH_WINDOW", false))
    for (int64_t S : {4096, 8192, 16384})
      if (selected("EJK_BENCH_S", S))
        bench_shape(vs, Shape{S, 64, true, 32, 8, 1024, 0, 30.f});
  return 0;
}
