// The runtime's CUDA path end to end without the project's CMake: render the template,
// compile with NVRTC (runtime/src/cuda/nvrtc_compiler.cpp, dlopen'd), and on a GPU load the
// cubin and launch through the dlopen'd driver (cuda_backend.cpp), checked against the float64
// reference. Built by g++ alone (bench/cuda/build_and_check.sh, or by hand):
//
//   g++ -std=c++20 -O2 -DFMT_HEADER_ONLY -I kernels -I core/include -I runtime/src -I bench/cuda
//       bench/cuda/runtime_smoke.cpp runtime/src/cuda/*.cpp core/src/render.cpp -ldl -o runtime_smoke
//   runtime_smoke compile [key]   NVRTC time and resources of the spec's AOT set, sm80 and
//                                 sm90a (or of one key, e.g. for a cold compile per process)
//   runtime_smoke run       NVRTC-compile for this GPU, launch, compare (needs a GPU)
//   runtime_smoke run-large the same past the 65535 of gridDim.y / z: 70000 sequences, 70000
//                           heads, 70000 varlen sequences (head_dim 96: the sm80 family)
//   runtime_smoke bias-copy the runtime's bias copy (copy_bias_rows) against the driver's copies
#include <algorithm>
#include <chrono>
#include <dlfcn.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "cuda/cuda_backend.h"
#include "ejk/core/error.h"
#include "flash_reference.h"
#include "smoke_spec.h"

namespace {
using namespace ejk;
using namespace ejk::cuda;
using ejk::smoke::Spec;
using ejk::smoke::render;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read " + path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Every header under kernels/ejk/kernels/{common,cuda} and their folders (cuda/wgmma), by
// include path, as the library embeds them (a list here went stale when a header was added).
std::vector<std::pair<std::string, std::string>> kernel_headers() {
  std::vector<std::pair<std::string, std::string>> h;
  for (const char* dir : {"ejk/kernels/common", "ejk/kernels/cuda"})
    for (const auto& e : std::filesystem::recursive_directory_iterator(std::string("kernels/") + dir)) {
      if (!e.is_regular_file()) continue;
      const std::string rel = std::filesystem::relative(e.path(), "kernels").string();
      h.emplace_back(rel, read_file("kernels/" + rel));
    }
  return h;
}

// specs/flash_attention.yaml's CUDA AOT sets, one dtype (the other compiles the same code).
std::vector<Spec> aot_like_set() {
  std::vector<Spec> v;
  for (const char* t : {"sm80", "sm90a"})
    for (int d : {64, 96, 128, 192, 256})
      for (bool causal : {false, true}) {
        const bool sm90 = std::string(t) == "sm90a";
        Spec s{t, "bf16", d, 128, d <= 128 ? (sm90 ? 128 : 64) : (sm90 ? 64 : 32)};
        s.causal = causal;
        v.push_back(s);
      }
  Spec all{"sm90a", "f16", 128, 128, 64, true, true, true, true, true};
  v.push_back(all);
  // The three keys of `run` (NOTES.md's cold-compile numbers).
  v.push_back(Spec{"sm90a", "f16", 64, 128, 64});
  v.push_back(Spec{"sm90a", "bf16", 256, 128, 64, true, true, true, true, true});
  // The same with segment ids: what the segments flag adds to a key that has it.
  Spec seg{"sm90a", "bf16", 256, 128, 64, true, true, true, true, true};
  seg.segments = true;
  v.push_back(seg);
  return v;
}

// only: compile just the key equal to it (one cold compile per process; empty: every key).
int compile_all(const std::string& only) {
  const NvrtcCompiler& nv = NvrtcCompiler::get();
  const std::string tmpl = read_file("templates/flash_fwd.cuda.cu.tmpl");
  const auto headers = kernel_headers();
  std::printf("%s\n", nv.identity().c_str());
  for (const Spec& s : aot_like_set()) {
    if (!only.empty() && s.key() != only) continue;
    const CubinResult r = nv.compile({s.key() + ".cu", render(tmpl, s), headers},
                                     nvrtc_arch(s.target), s.symbol());
    std::printf("%-52s %7.0f ms  regs %3d  spill %d/%d  cubin %zu B\n", s.key().c_str(),
                r.compile_ms, r.resources.registers, r.resources.spill_store_bytes,
                r.resources.spill_load_bytes, r.cubin.size());
  }
  return 0;
}

// Device memory through the dlopen'd driver, freed on scope exit.
struct DeviceBuffer {
  CUdeviceptr ptr = 0;
  explicit DeviceBuffer(size_t bytes) {
    const CudaDriver& d = CudaDriver::get();
    d.check(d.cuMemAlloc(&ptr, bytes == 0 ? 16 : bytes), "cuMemAlloc");
  }
  template <class T> static DeviceBuffer from(const std::vector<T>& h) {
    DeviceBuffer b(h.size() * sizeof(T));
    if (!h.empty()) {
      const CudaDriver& d = CudaDriver::get();
      d.check(d.cuMemcpyHtoD(b.ptr, h.data(), h.size() * sizeof(T)), "cuMemcpyHtoD");
    }
    return b;
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr(o.ptr) { o.ptr = 0; }
  ~DeviceBuffer() {
    if (ptr != 0) CudaDriver::get().cuMemFree(ptr);
  }
  template <class T> T* as() const { return reinterpret_cast<T*>(ptr); }
};

double rel_l2(const std::vector<double>& ref, const std::vector<double>& got) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isinf(ref[i]) && std::isinf(got[i])) continue;  // -inf lse rows agree
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::isnan(num) ? INFINITY : std::sqrt(num / (den > 0 ? den : 1));
}

// Largest |got - ref| (NaN: infinite), -inf lse rows agreeing. rel_l2 over millions of rows
// would not see one wrong sequence; this does.
double max_abs(const std::vector<double>& ref, const std::vector<double>& got) {
  double m = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isinf(ref[i]) && std::isinf(got[i])) continue;
    const double e = std::fabs(got[i] - ref[i]);
    m = std::isnan(e) ? INFINITY : std::max(m, e);
  }
  return m;
}

struct Sizes {
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv;
  bool varlen = false;  // packed sequences of 1..seqlen_q / 1..seqlen_k tokens (random)
};

// The bias copy for `target` (specs/flash_fwd_bias_rows.yaml), rendered and compiled as the
// runtime's JIT would for a target without it built in.
std::unique_ptr<LoadedKernel> load_bias_copy(const std::string& target) {
  const std::string key = "flash_fwd_bias_rows.cuda." + target + ".b16";
  std::string symbol = "ejk_" + key;
  std::replace(symbol.begin(), symbol.end(), '.', '_');
  const std::string path = "templates/flash_fwd_bias_rows.cuda.cu.tmpl";
  const std::string src = render_template(
      read_file(path),
      {{"banner", "// Generated by runtime_smoke. Do not edit."}, {"key", key}, {"symbol", symbol},
       {"target", target}, {"elem", "b16"}},
      path);
  const CubinResult cub = NvrtcCompiler::get().compile({key + ".cu", src, kernel_headers()},
                                                       nvrtc_arch(target), symbol);
  return std::make_unique<LoadedKernel>(cub.cubin, symbol);
}

// One variant: NVRTC for this device, load, launch on a random problem, compare. max_err > 0:
// every output and lse element must also be within max_err of the reference.
bool run_one(const Spec& s, const DeviceInfo& dev, std::mt19937_64& rng,
             Sizes z = {2, 173, 301, 6, 2}, double max_err = 0) {
  const CudaDriver& d = CudaDriver::get();
  const NvrtcCompiler& nv = NvrtcCompiler::get();
  const CubinResult cub = nv.compile({s.key() + ".cu", render(read_file("templates/flash_fwd.cuda.cu.tmpl"), s),
                                      kernel_headers()},
                                     nvrtc_arch(s.target), s.symbol());
  LoadedKernel kernel(cub.cubin, s.symbol());
  check::Problem pr;
  pr.f16 = s.dtype == "f16", pr.head_dim = s.d;
  pr.causal = s.causal, pr.window = s.window, pr.softcap = s.softcap, pr.sinks = s.sinks, pr.bias = s.bias;
  pr.batch = z.batch, pr.seqlen_q = z.seqlen_q, pr.seqlen_k = z.seqlen_k;
  pr.heads_q = z.heads_q, pr.heads_kv = z.heads_kv;
  pr.window_left = 40, pr.window_right = 7, pr.cap = 12.f, pr.num_sinks = 2;
  if (z.varlen) {
    pr.varlen = true;
    pr.cu_q = {0}, pr.cu_k = {0};
    for (int64_t b = 0; b < z.batch; ++b) {
      pr.cu_q.push_back(pr.cu_q.back() + 1 + int32_t(rng() % z.seqlen_q));
      pr.cu_k.push_back(pr.cu_k.back() + 1 + int32_t(rng() % z.seqlen_k));
    }
  }
  const float scale = 1.f / std::sqrt(float(s.d));
  const check::HostInputs in = check::make_inputs(pr, rng);
  DeviceBuffer q = DeviceBuffer::from(in.q), k = DeviceBuffer::from(in.k), v = DeviceBuffer::from(in.v);
  DeviceBuffer bias = DeviceBuffer::from(in.bias), aux = DeviceBuffer::from(in.aux);
  const size_t out_n = pr.total_q() * pr.heads_q * s.d;
  const size_t lse_n = pr.varlen ? pr.heads_q * pr.total_q() : pr.batch * pr.heads_q * pr.seqlen_q;
  DeviceBuffer cu_q = DeviceBuffer::from(pr.cu_q), cu_k = DeviceBuffer::from(pr.cu_k);
  DeviceBuffer out(out_n * 2), lse(lse_n * 4);
  d.check(d.cuMemsetD8(out.ptr, 0xff, out_n * 2), "poison out");  // NaN in bf16 and fp16
  d.check(d.cuMemsetD8(lse.ptr, 0xff, lse_n * 4), "poison lse");
  FlashFwdParams p{};
  p.q = q.as<void>(), p.k = k.as<void>(), p.v = v.as<void>(), p.out = out.as<void>();
  p.lse = lse.as<float>();
  p.bias = s.bias ? bias.as<void>() : nullptr;
  p.softmax_aux = s.sinks ? aux.as<float>() : nullptr;
  p = check::params_for(pr, p, scale);
  if (pr.varlen) p.cu_seqlens_q = cu_q.as<i32>(), p.cu_seqlens_k = cu_k.as<i32>();
  const LaunchShape shape =
      flash_fwd_launch_shape(s.target, s.d, s.bq, s.bk, p, dev.sm_count, false, s.bias);
  const std::unique_ptr<LoadedKernel> copy = s.bias ? load_bias_copy(s.target) : nullptr;
  launch_flash_fwd(kernel, shape, p, dev, nullptr, copy.get());
  d.check(d.cuCtxSynchronize(), "running the kernel");
  std::vector<uint16_t> out_bits(out_n);
  std::vector<float> lse_h(lse_n);
  d.check(d.cuMemcpyDtoH(out_bits.data(), out.ptr, out_n * 2), "cuMemcpyDtoH");
  d.check(d.cuMemcpyDtoH(lse_h.data(), lse.ptr, lse_n * 4), "cuMemcpyDtoH");
  const check::Reference ref = check::reference(pr, in, scale);
  std::vector<double> got(out_n), got_lse(lse_h.begin(), lse_h.end());
  for (size_t i = 0; i < out_n; ++i) got[i] = check::elem_to_f32(pr, out_bits[i]);
  const double e_out = rel_l2(ref.out, got), e_lse = rel_l2(ref.lse, got_lse);
  const KernelResources res = kernel.resources();
  bool ok = e_out <= 1e-2 && e_lse <= 1e-2;
  std::printf("%s %-52s nvrtc %6.0f ms  regs %d local %d  out %.2e lse %.2e", ok ? "PASS" : "FAIL",
              s.key().c_str(), cub.compile_ms, res.registers, res.stack_bytes, e_out, e_lse);
  if (max_err > 0) {
    const double m_out = max_abs(ref.out, got), m_lse = max_abs(ref.lse, got_lse);
    ok = ok && m_out <= max_err && m_lse <= max_err;
    std::printf("  max |err| out %.2e lse %.2e  %sB=%lld S=%lld/%lld Hq=%lld Hkv=%lld grid %u,%u,%u x %lld  %s",
                m_out, m_lse, z.varlen ? "varlen " : "", (long long)z.batch, (long long)z.seqlen_q, (long long)z.seqlen_k,
                (long long)z.heads_q, (long long)z.heads_kv, shape.grid[0], shape.grid[1],
                shape.grid[2], (long long)shape.launches(), ok ? "PASS" : "FAIL");
  }
  std::printf("\n");
  return ok;
}

int run_on_device() {
  const DeviceInfo& dev = use_device(0);
  std::printf("%s (cc %d.%d, %d SMs, %d B smem opt-in) -> target %s\n", dev.name.c_str(), dev.major,
              dev.minor, dev.sm_count, dev.max_smem_optin, dev.target.c_str());
  std::mt19937_64 rng(std::random_device{}());
  int failed = 0;
  for (Spec s : {Spec{"", "bf16", 128, 128, 128, true}, Spec{"", "f16", 64, 128, 64},
                 Spec{"", "bf16", 256, 128, 64, true, true, true, true, true}}) {
    s.target = dev.target;
    failed += !run_one(s, dev, rng);
  }
  return failed == 0 ? 0 : 1;
}

// Problems past the 65535 of gridDim.y / z (the sm80 family runs them as several launches over
// slices of heads and sequences; d96 is that family on sm90a too): 70000 sequences (GQA 2:1),
// 70000 heads (GQA 10:1), 8 tokens each, then 70000 packed sequences of 1-12 tokens (one q
// block each: the random inputs and the float64 reference of the 0.5-1 M rows take ~30 s of
// host time). f16: its output rounding leaves room for a max-error bound that one wrong
// sequence or head breaks.
int run_large() {
  const DeviceInfo& dev = use_device(0);
  std::printf("%s -> target %s\n", dev.name.c_str(), dev.target.c_str());
  std::mt19937_64 rng(20261122);
  const Spec s{dev.target, "f16", 96, 128, 64, true};
  int failed = 0;
  for (Sizes z : {Sizes{70000, 8, 8, 2, 1}, Sizes{1, 8, 8, 70000, 7000},
                 Sizes{70000, 12, 12, 2, 1, true}})
    failed += !run_one(s, dev, rng, z, 2e-2);
  return failed == 0 ? 0 : 1;
}

// cuda.h's CUDA_MEMCPY2D (_v2 ABI): the per-plane pitched copies the runtime made before it had
// a copy kernel (session 23), timed here as the "before".
struct Memcpy2D {
  size_t src_x_bytes, src_y;
  int src_memory_type;
  const void* src_host;
  CUdeviceptr src_device;
  void* src_array;
  size_t src_pitch;
  size_t dst_x_bytes, dst_y;
  int dst_memory_type;
  void* dst_host;
  CUdeviceptr dst_device;
  void* dst_array;
  size_t dst_pitch;
  size_t width_bytes, height;
};

// Median seconds per call of `f` over 7 rounds of 20 calls (after 3 warm-up calls).
template <class F> double seconds_per_call(F f) {
  const CudaDriver& d = CudaDriver::get();
  for (int i = 0; i < 3; ++i) f();
  d.check(d.cuCtxSynchronize(), "warm-up");
  std::vector<double> t;
  for (int round = 0; round < 7; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 20; ++i) f();
    d.check(d.cuCtxSynchronize(), "timed calls");
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 20);
  }
  std::sort(t.begin(), t.end());
  return t[3];
}

// The bias copy (copy_bias_rows) on [1, 16, 4096, Sk] bf16 rows that the kernels cannot read in
// place, against the driver: cuMemcpyDtoDAsync of the same bytes (the device's copy rate) and
// the per-plane cuMemcpy2DAsync the runtime used before. GB/s count bytes read + written.
int bias_copy_bench() {
  const DeviceInfo& dev = use_device(0);
  const CudaDriver& d = CudaDriver::get();
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  auto dtod = reinterpret_cast<int (*)(CUdeviceptr, CUdeviceptr, size_t, CUstream)>(
      lib ? dlsym(lib, "cuMemcpyDtoDAsync_v2") : nullptr);
  auto copy2d = reinterpret_cast<int (*)(const Memcpy2D*, CUstream)>(
      lib ? dlsym(lib, "cuMemcpy2DAsync_v2") : nullptr);
  if (dtod == nullptr || copy2d == nullptr) throw Error("cuMemcpyDtoDAsync / cuMemcpy2DAsync not found");
  const std::unique_ptr<LoadedKernel> kernel = load_bias_copy(dev.target);
  std::printf("%s; %s\n", dev.name.c_str(), kernel->symbol().c_str());
  std::printf("%-22s %10s %10s %10s %10s %8s %8s\n", "rows", "ours ms", "2d ms", "dtod ms",
              "ours GB/s", "x dtod", "x 2d");
  constexpr int64_t kHeads = 16, kRows = 4096;
  for (auto [keys, offset] : {std::pair<int64_t, int64_t>{4095, 0}, {4092, 0}, {4097, 0}, {4096, 1},
                              {1001, 0}}) {
    FlashFwdBiasRows c{};
    c.batches = 1, c.heads = kHeads, c.rows = kRows, c.keys = keys;
    c.stride_q = keys, c.stride_h = kRows * keys, c.stride_b = 0;
    c.pitch = flash_fwd_bias_pitch(keys);
    const size_t src_bytes = size_t(kHeads * kRows * keys + offset) * 2;
    const size_t dst_bytes = size_t(kHeads * kRows * c.pitch) * 2;
    DeviceBuffer src(src_bytes), dst(dst_bytes);
    d.check(d.cuMemsetD8(src.ptr, 0x3c, src_bytes), "filling the source");
    c.src = src.as<uint16_t>() + offset, c.dst = dst.as<uint16_t>();
    const double ours = seconds_per_call([&] { copy_bias_rows(*kernel, c, dev.sm_count); });
    const size_t flat_bytes = std::min(src_bytes, dst_bytes);
    const double flat = seconds_per_call([&] { d.check(dtod(dst.ptr, src.ptr, flat_bytes, nullptr), "DtoD"); });
    const double planes = seconds_per_call([&] {
      for (int64_t h = 0; h < kHeads; ++h) {
        Memcpy2D m{};
        m.src_memory_type = m.dst_memory_type = 2;  // device
        m.src_device = src.ptr + CUdeviceptr((offset + h * c.stride_h) * 2);
        m.src_pitch = size_t(keys) * 2, m.width_bytes = size_t(keys) * 2, m.height = size_t(kRows);
        m.dst_device = dst.ptr + CUdeviceptr(h * kRows * c.pitch * 2), m.dst_pitch = size_t(c.pitch) * 2;
        d.check(copy2d(&m, nullptr), "cuMemcpy2DAsync");
      }
    });
    const double moved = double(src_bytes + dst_bytes);
    char name[64];
    std::snprintf(name, sizeof(name), "16x4096x%lld+%lld", (long long)keys, (long long)offset);
    // x dtod: our rate of bytes moved against the driver's flat copy's.
    std::printf("%-22s %10.3f %10.3f %10.3f %10.0f %8.2f %8.2f\n", name, ours * 1e3, planes * 1e3,
                flat * 1e3, moved / ours / 1e9, (moved / ours) / (2.0 * double(flat_bytes) / flat),
                planes / ours);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "compile";
  try {
    if (mode == "compile") return compile_all(argc > 2 ? argv[2] : "");
    if (mode == "run") return run_on_device();
    if (mode == "run-large") return run_large();
    if (mode == "bias-copy") return bias_copy_bench();
  } catch (const ejk::BackendUnavailable& e) {
    std::printf("SKIP: %s\n", e.what());
    return 0;
  } catch (const std::exception& e) {
    std::printf("ERROR: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: runtime_smoke compile [key] | run | run-large | bias-copy\n");
  return 2;
}
