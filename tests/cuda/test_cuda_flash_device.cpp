// The CUDA flash forward on a GPU, through the runtime's own path (spec key -> rendered
// template -> NVRTC -> cuModuleLoadData -> cuLaunchKernel), against the float64 reference of
// bench/cuda/flash_reference.h (mask.h's semantics). SKIPs with the reason without a driver/GPU.
// Fresh random inputs every run (the seed is printed); outputs are poisoned with NaN first.
#include <catch2/catch_test_macros.hpp>

#include <cmath>

#include "cuda/cuda_backend.h"
#include "cuda_test_support.h"
#include "ejk/core/error.h"
#include "ejk/core/variant_key.h"
#include "flash_reference.h"

namespace ejk::test {
namespace {

// Device memory through the dlopen'd driver, freed at scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) {
    const cuda::CudaDriver& d = cuda::CudaDriver::get();
    d.check(d.cuMemAlloc(&ptr_, std::max<size_t>(bytes, 16)), "cuMemAlloc");
  }
  template <class T> explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size() * sizeof(T)) {
    const cuda::CudaDriver& d = cuda::CudaDriver::get();
    if (!host.empty()) d.check(d.cuMemcpyHtoD(ptr_, host.data(), host.size() * sizeof(T)), "cuMemcpyHtoD");
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cuda::CudaDriver::get().cuMemFree(ptr_); }
  template <class T> T* as() const { return reinterpret_cast<T*>(ptr_); }
  cuda::CUdeviceptr ptr() const { return ptr_; }

 private:
  cuda::CUdeviceptr ptr_ = 0;
};

double rel_l2(const std::vector<double>& ref, const std::vector<double>& got, size_t* mismatched_inf) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isinf(ref[i]) || std::isinf(got[i])) {
      *mismatched_inf += std::isinf(ref[i]) != std::isinf(got[i]) || ref[i] != got[i];
      continue;
    }
    num += (got[i] - ref[i]) * (got[i] - ref[i]);  // NaN propagates and fails the bound
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

struct Outcome {
  double out_err, lse_err;
  size_t inf_mismatch;
};

Outcome run_case(const VariantKey& key, check::Problem pr, std::mt19937_64& rng,
                 const cuda::DeviceInfo& dev) {
  const cuda::CubinResult cub = cuda::NvrtcCompiler::get().compile(
      cuda_source(key), cuda::nvrtc_arch(key.target), symbol_name(key));
  cuda::LoadedKernel kernel(cub.cubin, symbol_name(key));
  pr.f16 = key.get_enum("dtype") == "f16";
  pr.head_dim = key.get_int("head_dim");
  pr.causal = key.get_flag("causal"), pr.window = key.get_flag("window");
  pr.softcap = key.get_flag("softcap"), pr.sinks = key.get_flag("sinks"), pr.bias = key.get_flag("bias");
  const float scale = 1.f / std::sqrt(float(pr.head_dim));
  const check::HostInputs in = check::make_inputs(pr, rng);
  DeviceBuffer q(in.q), k(in.k), v(in.v), bias(in.bias), aux(in.aux), qs(in.q_seg), ks(in.kv_seg);
  DeviceBuffer cq(pr.cu_q), ck(pr.cu_k);
  const size_t out_n = pr.total_q() * pr.heads_q * pr.head_dim;
  const size_t lse_n = pr.varlen ? pr.heads_q * pr.total_q() : pr.batch * pr.heads_q * pr.seqlen_q;
  DeviceBuffer out(out_n * 2), lse(lse_n * 4);
  const cuda::CudaDriver& d = cuda::CudaDriver::get();
  d.check(d.cuMemsetD8(out.ptr(), 0xff, out_n * 2), "poisoning out");  // NaN in bf16 and f16
  d.check(d.cuMemsetD8(lse.ptr(), 0xff, lse_n * 4), "poisoning lse");
  FlashFwdParams p{};
  p.q = q.as<void>(), p.k = k.as<void>(), p.v = v.as<void>(), p.out = out.as<void>();
  p.lse = lse.as<float>();
  p.bias = pr.bias ? bias.as<void>() : nullptr;
  p.softmax_aux = pr.sinks ? aux.as<float>() : nullptr;
  p.q_segment_ids = pr.segments ? qs.as<i32>() : nullptr;
  p.kv_segment_ids = pr.segments ? ks.as<i32>() : nullptr;
  p.cu_seqlens_q = pr.varlen ? cq.as<i32>() : nullptr;
  p.cu_seqlens_k = pr.varlen ? ck.as<i32>() : nullptr;
  p = check::params_for(pr, p, scale);
  const int64_t D = pr.head_dim;
  cuda::launch_flash_fwd(kernel,
                         cuda::flash_fwd_launch_shape(key.target, D, key.get_int("block_q"),
                                                      key.get_int("block_k"), p, dev.sm_count),
                         p, dev);
  d.check(d.cuCtxSynchronize(), "running the kernel");
  std::vector<uint16_t> bits(out_n);
  std::vector<float> lse_h(lse_n);
  d.check(d.cuMemcpyDtoH(bits.data(), out.ptr(), out_n * 2), "cuMemcpyDtoH");
  d.check(d.cuMemcpyDtoH(lse_h.data(), lse.ptr(), lse_n * 4), "cuMemcpyDtoH");
  const check::Reference ref = check::reference(pr, in, scale);
  std::vector<double> got(out_n), got_lse(lse_h.begin(), lse_h.end());
  for (size_t i = 0; i < out_n; ++i) got[i] = check::elem_to_f32(pr, bits[i]);
  Outcome o{0, 0, 0};
  o.out_err = rel_l2(ref.out, got, &o.inf_mismatch);
  o.lse_err = rel_l2(ref.lse, got_lse, &o.inf_mismatch);
  return o;
}

TEST_CASE("CUDA flash forward matches the float64 reference on random problems", "[device]") {
  std::string why;
  if (cuda::CudaDriver::load(&why) == nullptr) SKIP("no CUDA device: " + why);
  const cuda::DeviceInfo& dev = cuda::use_device(0);
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed << ", device " << dev.name << ", target " << dev.target);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> len(1, 260), win(0, 80);
  const char* const flags[] = {"causal", "window", "softcap", "sinks", "bias"};
  const int configs[][3] = {{64, 128, 64}, {128, 128, 128}, {128, 64, 32}, {96, 64, 64}, {256, 128, 64}};
  for (int i = 0; i < 10; ++i) {
    VariantKey key = flash_schema().blank_key("cuda", dev.target);
    key.set_enum("dtype", rng() & 1 ? "bf16" : "f16");
    const auto& c = configs[i % 5];
    key.set_int("head_dim", c[0]), key.set_int("block_q", c[1]), key.set_int("block_k", c[2]);
    for (const char* f : flags) key.set_flag(f, rng() % 2 == 0);
    check::Problem pr;
    pr.batch = 2, pr.heads_q = 4, pr.heads_kv = rng() & 1 ? 1 : 2;
    pr.seqlen_q = len(rng), pr.seqlen_k = len(rng);
    pr.window_left = win(rng), pr.window_right = win(rng), pr.cap = 8.f, pr.num_sinks = 2;
    pr.segments = i % 4 == 1;
    key.set_flag("segments", pr.segments);  // as the runtime keys it: the flag iff ids are given
    pr.normalize = i % 3 != 2;
    if (i % 4 == 3) {  // packed sequences
      pr.varlen = true, pr.batch = 3, pr.bias_bcast_b = true;
      pr.cu_q = {0}, pr.cu_k = {0};
      pr.seqlen_q = pr.seqlen_k = 0;
      for (int b = 0; b < 3; ++b) {
        pr.cu_q.push_back(pr.cu_q.back() + len(rng)), pr.cu_k.push_back(pr.cu_k.back() + len(rng));
        pr.seqlen_q = std::max<int64_t>(pr.seqlen_q, pr.cu_q[b + 1] - pr.cu_q[b]);
        pr.seqlen_k = std::max<int64_t>(pr.seqlen_k, pr.cu_k[b + 1] - pr.cu_k[b]);
      }
    }
    const Outcome o = run_case(key, pr, rng, dev);
    INFO(to_string(key) << " Sq=" << pr.seqlen_q << " Sk=" << pr.seqlen_k
                        << (pr.varlen ? " varlen" : "") << (pr.segments ? " segments" : ""));
    CHECK(o.out_err <= 1e-2);  // bf16/f16 bound; NaN compares false and fails
    CHECK(o.lse_err <= 1e-2);
    CHECK(o.inf_mismatch == 0);
  }
}

TEST_CASE("without a driver the backend says why", "[cuda]") {
  std::string why;
  if (cuda::CudaDriver::load(&why) != nullptr) SKIP("a CUDA driver is present on this machine");
  CHECK(why.find("libcuda") != std::string::npos);
  CHECK_THROWS_AS(cuda::use_device(0), BackendUnavailable);
}

}  // namespace
}  // namespace ejk::test
