// The product's numbers: flash attention through the public API as a framework calls it, back
// to back on one stream, timed with CUDA events (and the host clock for host time per call).
//
//   bench_api overhead [--cpu]       host time per call of a warm variant (C++ API, C ABI and a
//                                    plan's run), the CUDA driver's share of it (four TMA
//                                    encodes and one launch of an empty kernel with the same
//                                    parameter bytes), and whether small calls run GPU-bound
//   bench_api row D S CAUSAL [REPS]  one row of the forward grid (bf16, B*S = 16k, H*D = 2048):
//                                    TFLOP/s back to back (batches of ~50 ms) and of the kernel
//                                    alone, one JSON line
//   bench_api loads D... [--causal]  one small CUDA call per head_dim in one process: each
//                                    variant's source and load time (bundles, cache)
//
// "Kernel alone": each launch queued behind a spin kernel, so no host time can show in its
// event interval. Built against the current API, or with -DEJK_BENCH_OLD_API against the API
// before the op engine (no context: the legacy default stream), to compare both in one run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#ifdef EJK_BENCH_OLD_API
#include "ejk/ejk.h"
#include "ejk/flash_attention.h"
#else
#include "ejk/ejk.h"
#include "ejk/op.h"
#include "ejk/ops/flash_attention.h"
#endif

#if EJK_BENCH_CUDA
#include <cuda.h>
#include <cuda_runtime.h>

#include "ejk/kernels/common/flash_params.h"
#endif

namespace {

using Clock = std::chrono::steady_clock;

struct Problem {
  int64_t b, s, h, d;
  bool causal;
  ejk::DType dtype;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double flops(const Problem& p) {
  const double pairs = p.causal ? double(p.s) * double(p.s + 1) / 2 : double(p.s) * double(p.s);
  return 4.0 * double(p.b * p.h * p.d) * pairs;
}

// Tensors of one problem on `device`, filled with small random values.
struct Buffers {
  ejk::Tensor q, k, v, out, lse;
  ejk::FlashAttentionInputs in;
  ejk::FlashAttentionOptions opt;
};

Buffers make(const Problem& p, ejk::Device device) {
  Buffers x;
  auto random = [&](std::vector<int64_t> shape, ejk::DType t) {
    ejk::Tensor host = ejk::Tensor::empty(shape, t);
    uint32_t state = 12345;
    for (int64_t i = 0; i < host.numel(); ++i) {
      state = state * 1664525u + 1013904223u;
      const float f = float(int(state >> 9) % 2001 - 1000) / 1000.0f;  // [-1, 1]
      if (t == ejk::DType::f32) {
        static_cast<float*>(host.data())[i] = f;
      } else {  // bf16: the high half of the f32 bits
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        static_cast<uint16_t*>(host.data())[i] = uint16_t(bits >> 16);
      }
    }
    return device.kind == ejk::DeviceKind::cpu ? host : host.to(device);
  };
  x.q = random({p.b, p.s, p.h, p.d}, p.dtype);
  x.k = random({p.b, p.s, p.h, p.d}, p.dtype);
  x.v = random({p.b, p.s, p.h, p.d}, p.dtype);
  x.out = ejk::Tensor::empty({p.b, p.s, p.h, p.d}, p.dtype, device);
  x.lse = ejk::Tensor::empty({p.b, p.h, p.s}, ejk::DType::f32, device);
  x.in.q = x.q.view(), x.in.k = x.k.view(), x.in.v = x.v.view();
  x.opt.causal = p.causal;
  return x;
}

void call_cpp(Buffers& x, void* stream) {
#ifdef EJK_BENCH_OLD_API
  (void)stream;
  ejk::flash_attention_into(x.in, x.opt, x.out.view(), x.lse.view());
#else
  ejk::Context ctx;
  ctx.stream = stream;
  ejk::flash_attention_into(x.in, x.opt, x.out.view(), x.lse.view(), ctx);
#endif
}

// The C ABI call, descriptors built per call as a binding would.
void call_c(Buffers& x, const Problem& p, void* stream) {
  const int64_t qs[4] = {p.b, p.s, p.h, p.d}, ls[3] = {p.b, p.h, p.s};
  const int kind = x.q.view().device.kind == ejk::DeviceKind::cpu ? EJK_DEVICE_CPU : EJK_DEVICE_CUDA;
  const int dt = p.dtype == ejk::DType::bf16 ? EJK_BF16 : EJK_F32;
  ejk_tensor q{x.q.data(), dt, kind, 0, 4, qs, nullptr}, k{x.k.data(), dt, kind, 0, 4, qs, nullptr},
      v{x.v.data(), dt, kind, 0, 4, qs, nullptr}, o{x.out.data(), dt, kind, 0, 4, qs, nullptr},
      l{x.lse.data(), EJK_F32, kind, 0, 3, ls, nullptr};
#ifdef EJK_OPS_FLASH_ATTENTION_C_H  // the C function generated from the spec
  ejk_flash_attention_options opt;
  ejk_flash_attention_options_init(&opt);
#else  // the hand-written one before it, so one bench source measures both sides
  ejk_flash_options opt;
  ejk_flash_options_init(&opt);
#endif
  opt.causal = p.causal;
  opt.block_q = x.opt.block_q;
#ifdef EJK_BENCH_OLD_API
  (void)stream;
  const int rc = ejk_flash_attention(&q, &k, &v, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, &opt, &o, &l);
#else
  ejk_context ctx;
  ejk_context_init(&ctx);
  ctx.stream = stream;
  const int rc = ejk_flash_attention(&ctx, &q, &k, &v, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, &opt, &o, &l);
#endif
  if (rc != EJK_OK) {
    std::fprintf(stderr, "ejk_flash_attention: %s\n", ejk_last_error());
    std::exit(1);
  }
}

// Median host microseconds per call over `rounds` rounds of `n` back-to-back calls; `sync`
// drains the device between rounds so a full launch queue never blocks a measured call.
template <class F, class S>
double host_us_per_call(F&& call, S&& sync, int rounds, int n) {
  std::vector<double> per;
  for (int r = 0; r < rounds; ++r) {
    sync();
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) call();
    per.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / n);
  }
  return median(per);
}

void overhead_cpu() {
  // One task: the call runs on the caller's thread, so the time is the dispatch path's own.
  const Problem p{1, 16, 1, 64, false, ejk::DType::f32};
  Buffers x = make(p, ejk::Device{});
  x.opt.block_q = 64;  // a built-in key on every x86 target: no JIT needed
  for (int i = 0; i < 100; ++i) call_cpp(x, nullptr);
  const double cpp = host_us_per_call([&] { call_cpp(x, nullptr); }, [] {}, 21, 2000);
  const double c = host_us_per_call([&] { call_c(x, p, nullptr); }, [] {}, 21, 2000);
#ifndef EJK_BENCH_OLD_API
  // The allocating form: outputs sized from the bound call, then the run.
  const double alloc = host_us_per_call([&] { (void)ejk::flash_attention(x.in, x.opt); }, [] {}, 21, 2000);
#else
  const double alloc = 0;
#endif
  std::printf("{\"what\": \"cpu_overhead\", \"shape\": \"b1 s16 h1 d64 f32\", \"cpp_us\": %.3f, \"c_us\": %.3f, "
              "\"alloc_us\": %.3f}\n", cpp, c, alloc);
}

#if EJK_BENCH_CUDA
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

__global__ void spin(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// Kernel time alone: each launch queued behind a spin kernel on the (legacy) stream, so the
// start event runs only once the launch is already queued.
template <class F>
double kernel_alone_ms(F&& call, int reps) {
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "event");
  check(cudaEventCreate(&e1), "event");
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    spin<<<1, 1>>>(2'000'000);  // ~1 ms at 2 GHz: longer than any host call
    check(cudaEventRecord(e0, nullptr), "record");
    call();
    check(cudaEventRecord(e1, nullptr), "record");
    check(cudaEventSynchronize(e1), "sync");
    float t = 0;
    check(cudaEventElapsedTime(&t, e0, e1), "elapsed");
    ms.push_back(t);
  }
  return median(ms);
}

// Device time per call of `n` calls back to back (events around the batch), median of rounds.
template <class F>
double back_to_back_ms(F&& call, int rounds, int n) {
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "event");
  check(cudaEventCreate(&e1), "event");
  std::vector<double> ms;
  for (int r = 0; r < rounds; ++r) {
    check(cudaDeviceSynchronize(), "sync");
    check(cudaEventRecord(e0, nullptr), "record");
    for (int i = 0; i < n; ++i) call();
    check(cudaEventRecord(e1, nullptr), "record");
    check(cudaEventSynchronize(e1), "sync");
    float t = 0;
    check(cudaEventElapsedTime(&t, e0, e1), "elapsed");
    ms.push_back(t / n);
  }
  return median(ms);
}

#ifndef EJK_BENCH_OLD_API
// The C++ API's plan/run split for the same call: run() binds and launches, no plan lookup.
ejk::Args args_of(Buffers& x) {
  ejk::Args a;
  a.set("q", x.q.view()).set("k", x.k.view()).set("v", x.v.view()).set("out", x.out.view()).set("lse", x.lse.view());
  a.set("causal", x.opt.causal);
  return a;
}
#endif

// What the driver alone costs per call of the sm90a kernels: four tensor maps encoded and one
// launch of an empty kernel taking the same parameter bytes (params and maps by value); without
// `encode`, the launch alone.
struct FloorArgs {
  ejk::FlashFwdParams p;
  alignas(64) unsigned char maps[4][128];
};
__global__ void empty_kernel(const __grid_constant__ FloorArgs) {}

double driver_floor_us(const Problem& p, Buffers& x, cudaStream_t stream, bool encode) {
  FloorArgs a{};
  auto call = [&] {
    if (!encode) return empty_kernel<<<132, 384, 0, stream>>>(a);
    const cuuint64_t dims[4] = {cuuint64_t(p.d), cuuint64_t(p.s), cuuint64_t(p.h), cuuint64_t(p.b)};
    const cuuint64_t strides[3] = {cuuint64_t(p.h * p.d * 2), cuuint64_t(p.d * 2), cuuint64_t(p.s * p.h * p.d * 2)};
    const cuuint32_t box[4] = {64, 128, 1, 1}, ones[4] = {1, 1, 1, 1};
    void* bases[4] = {x.q.data(), x.k.data(), x.v.data(), x.out.data()};
    for (int i = 0; i < 4; ++i)
      if (cuTensorMapEncodeTiled(reinterpret_cast<CUtensorMap*>(a.maps[i]), CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4,
                                 bases[i], dims, strides, box, ones, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                 CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
        std::fprintf(stderr, "cuTensorMapEncodeTiled failed\n");
        std::exit(1);
      }
    empty_kernel<<<132, 384, 0, stream>>>(a);
  };
  for (int i = 0; i < 20; ++i) call();
  return host_us_per_call(call, [] { check(cudaDeviceSynchronize(), "sync"); }, 21, 200);
}

void overhead_cuda() {
  const ejk::Device gpu{ejk::DeviceKind::cuda, 0};
  for (const Problem& p : {Problem{1, 128, 16, 128, true, ejk::DType::bf16}, Problem{1, 4096, 16, 128, false, ejk::DType::bf16}}) {
    Buffers x = make(p, gpu);
    for (int i = 0; i < 20; ++i) call_cpp(x, nullptr);
    check(cudaDeviceSynchronize(), "sync");
    auto sync = [] { check(cudaDeviceSynchronize(), "sync"); };
    // Few enough calls per round that the launch queue never fills (it would block the host).
    const int n = p.s <= 256 ? 200 : 20;
    const double cpp = host_us_per_call([&] { call_cpp(x, nullptr); }, sync, 21, n);
    const double c = host_us_per_call([&] { call_c(x, p, nullptr); }, sync, 21, n);
#ifdef EJK_BENCH_OLD_API
    const double planned = 0;
#else
    const ejk::Args args = args_of(x);
    ejk::Context ctx;
    const ejk::Plan plan = ejk::plan("flash_attention", args, ctx);
    const double planned = host_us_per_call([&] { plan.run(args, ctx); }, sync, 21, n);
#endif
    const double floor = driver_floor_us(p, x, nullptr, true), launch = driver_floor_us(p, x, nullptr, false);
    const double alone = kernel_alone_ms([&] { call_cpp(x, nullptr); }, 31);
    const double b2b = back_to_back_ms([&] { call_cpp(x, nullptr); }, 11, n);
    std::printf("{\"what\": \"cuda_overhead\", \"shape\": \"b%lld s%lld h%lld d%lld%s bf16\", \"cpp_us\": %.3f, "
                "\"c_us\": %.3f, \"plan_run_us\": %.3f, \"driver_floor_us\": %.3f, \"launch_only_us\": %.3f, \"kernel_alone_us\": %.3f, "
                "\"back_to_back_us\": %.3f, \"ratio\": %.4f}\n",
                (long long)p.b, (long long)p.s, (long long)p.h, (long long)p.d, p.causal ? " causal" : "", cpp, c,
                planned, floor, launch, alone * 1e3, b2b * 1e3, alone / b2b);
  }
}

#ifndef EJK_BENCH_OLD_API
// Where each variant came from and what loading it cost, one call per head_dim in one process
// (e.g. a bundle's variants under EJK_BUNDLE_PATH with EJK_DISABLE_JIT=1): the first pays the
// process's one-time costs, the rest show the per-variant one.
void loads(const std::vector<int64_t>& head_dims, bool causal) {
  for (int64_t d : head_dims) {
    const Problem p{1, 256, 4, d, causal, ejk::DType::bf16};
    Buffers x = make(p, {ejk::DeviceKind::cuda, 0});
    ejk::Context ctx;
    const ejk::RunInfo info = ejk::flash_attention_into(x.in, x.opt, x.out.view(), x.lse.view(), ctx);
    std::printf("{\"key\": \"%s\", \"source\": \"%s\", \"load_ms\": %.3f, \"compile_ms\": %.1f}\n", info.key.c_str(),
                std::string(ejk::source_name(info.source)).c_str(), info.load_ms, info.compile_ms);
  }
  check(cudaDeviceSynchronize(), "sync");
}
#endif

constexpr double kBatchMs = 50;

void row(int64_t d, int64_t s, bool causal, int reps) {
  const Problem p{16384 / s, s, 2048 / d, d, causal, ejk::DType::bf16};
  Buffers x = make(p, {ejk::DeviceKind::cuda, 0});
  for (int i = 0; i < 5; ++i) call_cpp(x, nullptr);
  check(cudaDeviceSynchronize(), "sync");
  const double alone = kernel_alone_ms([&] { call_cpp(x, nullptr); }, reps);
  // Batches of ~50 ms: sustained load, as a framework's step and the peers' timer give. The
  // GPU's clock under its power limit depends on how long it has been busy; a short burst of a
  // few calls ran up to ~10% faster than a sustained stream.
  const int calls = std::clamp(int(kBatchMs / alone), 3, 2000);
  const double b2b = back_to_back_ms([&] { call_cpp(x, nullptr); }, 7, calls);
  std::printf("{\"d\": %lld, \"s\": %lld, \"causal\": %d, \"tflops\": %.2f, \"alone_tflops\": %.2f, \"ratio\": %.4f, "
              "\"calls_per_batch\": %d}\n",
              (long long)d, (long long)s, int(causal), flops(p) / (b2b * 1e9), flops(p) / (alone * 1e9), alone / b2b, calls);
}
#endif

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "overhead") {
      overhead_cpu();
#if EJK_BENCH_CUDA
      if (argc < 3 || std::string(argv[2]) != "--cpu") overhead_cuda();
#endif
      return 0;
    }
#if EJK_BENCH_CUDA
#ifndef EJK_BENCH_OLD_API
    if (mode == "loads" && argc >= 3) {
      std::vector<int64_t> dims;
      bool causal = false;
      for (int i = 2; i < argc; ++i) {
        if (std::string(argv[i]) == "--causal") causal = true;
        else dims.push_back(std::atoll(argv[i]));
      }
      loads(dims, causal);
      return 0;
    }
#endif
    if (mode == "row" && argc >= 5) {
      row(std::atoll(argv[2]), std::atoll(argv[3]), std::atoi(argv[4]) != 0, argc > 5 ? std::atoi(argv[5]) : 30);
      return 0;
    }
#endif
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_api: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: bench_api overhead [--cpu] | row D S CAUSAL [REPS] | loads D... [--causal]\n");
  return 2;
}
