// Shared by the device tests: the device (or SKIP with the reason), device buffers, the plan of
// a key as the engine holds it (the variant and its companions, compiled by NVRTC from this
// source tree), and one flash problem on the device launched through the library's own launch
// path (ops::launch_flash_fwd on an engine::CudaLaunchContext) and compared with the float64
// reference of bench/cuda/flash_reference.h (mask.h's semantics), outputs poisoned first.
#pragma once
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cuda/cuda_driver.h"
#include "cuda/device.h"
#include "cuda_test_support.h"
#include "engine/call.h"
#include "engine/cuda_exec.h"
#include "ejk/core/variant_key.h"
#include "flash_reference.h"
#include "ops/flash_attention/flash_cuda.h"
#include "ops/flash_attention/flash_op.h"

namespace ejk::test {

// Device 0 made current, or SKIP naming why there is none.
inline const cuda::DeviceInfo& device_or_skip() {
  std::string why;
  if (cuda::CudaDriver::load(&why) == nullptr) SKIP("no CUDA device: " + why);
  return cuda::use_device(0);
}

// The target the engine picks for device 0 (from the specs' `requires`).
inline const std::string& device_target() {
  return engine::target_for(flash_schema(), Backend::cuda, Device{DeviceKind::cuda, 0});
}

// Device memory through the dlopen'd driver, freed at scope exit. Sized exactly (a read past
// the end shows under compute-sanitizer memcheck).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) {
    const cuda::CudaDriver& d = cuda::CudaDriver::get();
    d.check(d.cuMemAlloc(&ptr_, std::max<size_t>(bytes, 16)), "cuMemAlloc");
  }
  // `host` at `offset` elements into a buffer that ends at its last element.
  template <class T>
  explicit DeviceBuffer(const std::vector<T>& host, size_t offset = 0) : DeviceBuffer((offset + host.size()) * sizeof(T)) {
    const cuda::CudaDriver& d = cuda::CudaDriver::get();
    if (!host.empty())
      d.check(d.cuMemcpyHtoD(ptr_ + offset * sizeof(T), host.data(), host.size() * sizeof(T)), "cuMemcpyHtoD");
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_) { o.ptr_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_ != 0) cuda::CudaDriver::get().cuMemFree(ptr_);
  }
  template <class T> T* as() const { return reinterpret_cast<T*>(ptr_); }
  cuda::CUdeviceptr ptr() const { return ptr_; }

 private:
  cuda::CUdeviceptr ptr_ = 0;
};

template <class T> std::vector<T> to_host(cuda::CUdeviceptr src, size_t n) {
  std::vector<T> h(n);
  const cuda::CudaDriver& d = cuda::CudaDriver::get();
  if (n > 0) d.check(d.cuMemcpyDtoH(h.data(), src, n * sizeof(T)), "cuMemcpyDtoH");
  return h;
}

inline double rel_l2(const std::vector<double>& ref, const std::vector<double>& got, size_t* mismatched_inf) {
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

// A key's kernel compiled by NVRTC from this source tree and loaded in device 0's context, once
// per key for the process.
inline std::shared_ptr<cuda::LoadedKernel> loaded_kernel(const VariantKey& key) {
  static std::map<std::string, std::shared_ptr<cuda::LoadedKernel>> kernels;
  std::shared_ptr<cuda::LoadedKernel>& k = kernels[to_string(key)];
  if (!k) {
    const cuda::CubinResult r =
        cuda::NvrtcCompiler::get().compile(cuda_source(key), cuda::nvrtc_arch(key.target), symbol_name(key));
    k = std::make_shared<cuda::LoadedKernel>(r.cubin, symbol_name(key));
  }
  return k;
}

// The plan the engine builds for a flash key: the variant and the op's companions in its order
// (a bias key's copy), each loaded.
inline engine::PlanData flash_plan(const VariantKey& key) {
  engine::PlanData plan;
  plan.op = &ops::flash_attention_op();
  plan.backend = Backend::cuda;
  plan.device = Device{DeviceKind::cuda, 0};
  plan.key = key;
  plan.key_string = to_string(key);
  plan.op->plan_facts(plan, plan.facts);
  plan.main.cuda = loaded_kernel(key);
  for (const VariantKey& c : ops::flash_attention_op().companions(key)) {
    engine::Variant v;
    v.cuda = loaded_kernel(c);
    plan.companions.push_back(std::move(v));
  }
  return plan;
}

struct Outcome {
  double out_err, lse_err;
  size_t inf_mismatch;
};

// How a case lays out what the reference problem leaves open.
struct CaseOptions {
  // softmax_aux as the seed's 1-D [num_sinks], shared by every head (sinks_stride_h = 0); else
  // [Hq, num_sinks].
  bool shared_sinks = false;
  // Elements from the bias buffer's (256-byte aligned) start to the bias: 1 puts it 2 bytes past
  // a 4-byte boundary, which no kernel reads in place.
  size_t bias_offset = 0;
};

// One problem on the device: its inputs, poisoned outputs, launches and the comparison with the
// float64 reference, apart so that several cases can be in flight at once (on streams).
class DeviceCase {
 public:
  DeviceCase(const VariantKey& key, check::Problem pr, std::mt19937_64& rng, CaseOptions opt = {})
      : pr_(with_key(key, pr)), scale_(1.f / std::sqrt(float(pr_.head_dim))), in_(check::make_inputs(pr_, rng)),
        out_n_(size_t(pr_.total_q() * pr_.heads_q * pr_.head_dim)),
        lse_n_(size_t(pr_.varlen ? pr_.heads_q * pr_.total_q() : pr_.batch * pr_.heads_q * pr_.seqlen_q)) {
    q_ = DeviceBuffer(in_.q), k_ = DeviceBuffer(in_.k), v_ = DeviceBuffer(in_.v);
    qs_ = DeviceBuffer(in_.q_seg), ks_ = DeviceBuffer(in_.kv_seg);
    cq_ = DeviceBuffer(pr_.cu_q), ck_ = DeviceBuffer(pr_.cu_k);
    out_ = DeviceBuffer(out_n_ * 2), lse_ = DeviceBuffer(lse_n_ * 4);
    bias_ = DeviceBuffer(in_.bias, opt.bias_offset);
    if (opt.shared_sinks && pr_.sinks) {
      // The reference reads [Hq, S]: every head gets head 0's sinks. The device gets [S], then
      // decoys where a per-head read would land, large enough to swamp every row's softmax.
      const size_t S = size_t(pr_.num_sinks);
      for (size_t i = S; i < in_.aux.size(); ++i) in_.aux[i] = in_.aux[i % S];
      std::vector<float> dev(in_.aux.size(), 30.f);
      std::copy_n(in_.aux.begin(), S, dev.begin());
      aux_ = DeviceBuffer(dev);
    } else {
      aux_ = DeviceBuffer(in_.aux);
    }
    FlashFwdParams p{};
    p.q = q_.as<void>(), p.k = k_.as<void>(), p.v = v_.as<void>(), p.out = out_.as<void>();
    p.lse = lse_.as<float>();
    p.bias = pr_.bias ? bias_.as<u16>() + opt.bias_offset : nullptr;
    p.softmax_aux = pr_.sinks ? aux_.as<float>() : nullptr;
    p.q_segment_ids = pr_.segments ? qs_.as<i32>() : nullptr;
    p.kv_segment_ids = pr_.segments ? ks_.as<i32>() : nullptr;
    p.cu_seqlens_q = pr_.varlen ? cq_.as<i32>() : nullptr;
    p.cu_seqlens_k = pr_.varlen ? ck_.as<i32>() : nullptr;
    p_ = check::params_for(pr_, p, scale_);
    p_.sinks_stride_h = opt.shared_sinks ? 0 : pr_.num_sinks;
  }

  const FlashFwdParams& params() const { return p_; }
  const check::Problem& problem() const { return pr_; }
  const check::HostInputs& inputs() const { return in_; }

  // The launch shape of the plan's key on a device of `sm_count` SMs.
  ops::FlashLaunchShape shape(const engine::PlanData& plan, int sm_count) const {
    return ops::flash_fwd_launch_shape(ops::flash_key_facts(flash_schema(), plan.key), p_, sm_count);
  }

  // Poisons the outputs (NaN in bf16 and f16) and launches on `stream` as the op does: the
  // stream's workspace reserved (the bias copy's scratch, the sm90a work counter), then
  // launch_flash_fwd with the launch shape of a device of `sm_count` SMs (fewer than the
  // device's: persistent blocks take more items). `dev` is what the launcher sees (its
  // shared memory limit, its SM count for the bias copy's grid).
  void launch(const engine::PlanData& plan, const cuda::DeviceInfo& dev, int sm_count, cuda::CUstream stream = nullptr) {
    const cuda::CudaDriver& d = cuda::CudaDriver::get();
    d.check(d.cuMemsetD8Async(out_.ptr(), 0xff, out_n_ * 2, stream), "poisoning out");
    d.check(d.cuMemsetD8Async(lse_.ptr(), 0xff, lse_n_ * 4, stream), "poisoning lse");
    const ops::FlashLaunchShape s = shape(plan, sm_count);
    engine::StreamWorkspace& ws = engine::stream_workspace(dev.ordinal, stream);
    // Two u32 per stream for the persistent blocks' draws (sm90/schedule.cuh, sm90::Drawn).
    ws.reserve(ops::bias_copy_bytes(p_, s.bias_chunks), s.tma ? 2 * sizeof(u32) : 0, stream);
    engine::CudaLaunchContext lc(dev, stream, plan, ws);
    ops::launch_flash_fwd(lc, s, p_);
  }

  // The errors of the last launch's results (synchronizes the context).
  Outcome outcome() const {
    const cuda::CudaDriver& d = cuda::CudaDriver::get();
    d.check(d.cuCtxSynchronize(), "running the kernel");
    const std::vector<uint16_t> bits = to_host<uint16_t>(out_.ptr(), out_n_);
    const std::vector<float> lse_h = to_host<float>(lse_.ptr(), lse_n_);
    if (!ref_) ref_ = check::reference(pr_, in_, scale_);  // once per case: seconds of host time
    const check::Reference& ref = *ref_;
    std::vector<double> got(out_n_), got_lse(lse_h.begin(), lse_h.end());
    for (size_t i = 0; i < out_n_; ++i) got[i] = check::elem_to_f32(pr_, bits[i]);
    Outcome o{0, 0, 0};
    o.out_err = rel_l2(ref.out, got, &o.inf_mismatch);
    o.lse_err = rel_l2(ref.lse, got_lse, &o.inf_mismatch);
    return o;
  }

  // Whether out and lse still hold the poison of the last launch (synchronizes the context).
  bool outputs_untouched() const {
    const cuda::CudaDriver& d = cuda::CudaDriver::get();
    d.check(d.cuCtxSynchronize(), "running the kernel");
    const std::vector<uint8_t> o = to_host<uint8_t>(out_.ptr(), out_n_ * 2), l = to_host<uint8_t>(lse_.ptr(), lse_n_ * 4);
    auto poisoned = [](const std::vector<uint8_t>& b) {
      return std::all_of(b.begin(), b.end(), [](uint8_t x) { return x == 0xff; });
    };
    return poisoned(o) && poisoned(l);
  }

 private:
  static check::Problem with_key(const VariantKey& key, check::Problem pr) {
    pr.f16 = key.get_enum("dtype") == "f16";
    pr.head_dim = key.get_int("head_dim");
    pr.causal = key.get_flag("causal"), pr.window = key.get_flag("window");
    pr.softcap = key.get_flag("softcap"), pr.sinks = key.get_flag("sinks"), pr.bias = key.get_flag("bias");
    pr.segments = key.get_flag("segments");  // as the runtime keys it: the flag iff ids are given
    return pr;
  }

  check::Problem pr_;
  float scale_;
  check::HostInputs in_;
  size_t out_n_, lse_n_;
  DeviceBuffer q_, k_, v_, bias_, aux_, qs_, ks_, cq_, ck_, out_, lse_;
  FlashFwdParams p_{};
  mutable std::optional<check::Reference> ref_;
};

// The bf16/f16 bounds every device case meets; NaN compares false and fails.
#define EJK_CHECK_OUTCOME(o)       \
  do {                             \
    const Outcome o_ = (o);        \
    CHECK(o_.out_err <= 1e-2);     \
    CHECK(o_.lse_err <= 1e-2);     \
    CHECK(o_.inf_mismatch == 0);   \
  } while (0)

}  // namespace ejk::test
