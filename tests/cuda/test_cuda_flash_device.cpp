// The CUDA flash forward on a GPU, through the runtime's own path (spec key -> rendered
// template -> NVRTC -> cuModuleLoadData -> cuLaunchKernel), against the float64 reference of
// bench/cuda/flash_reference.h (mask.h's semantics). SKIPs with the reason without a driver/GPU.
// Fresh random inputs every run (the seed is printed); outputs are poisoned with NaN first.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <memory>
#include <optional>

#include "cuda/cuda_backend.h"
#include "cuda_test_support.h"
#include "ejk/core/error.h"
#include "ejk/core/variant_key.h"
#include "ejk/kernels/cuda/flash_fwd_traits.cuh"
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

std::vector<uint8_t> compile_cubin(const VariantKey& key) {
  return cuda::NvrtcCompiler::get()
      .compile(cuda_source(key), cuda::nvrtc_arch(key.target), symbol_name(key))
      .cubin;
}

cuda::LoadedKernel load_kernel(const VariantKey& key) {
  return cuda::LoadedKernel(compile_cubin(key), symbol_name(key));
}

// The bias copy of `target` (flash_fwd_bias_rows), compiled once per target for the process.
const cuda::LoadedKernel& bias_copy(const std::string& target) {
  static std::map<std::string, std::unique_ptr<cuda::LoadedKernel>> copies;
  std::unique_ptr<cuda::LoadedKernel>& copy = copies[target];
  if (!copy) {
    const VariantKey key = bias_rows_test_key(target);
    copy = std::make_unique<cuda::LoadedKernel>(compile_cubin(key), symbol_name(key));
  }
  return *copy;
}

// What a bias key's launches get for a bias they cannot read in place (odd Sk), as the
// runtime passes it; null for other keys.
const cuda::LoadedKernel* bias_copy_for(const VariantKey& key) {
  return key.get_flag("bias") ? &bias_copy(key.target) : nullptr;
}

struct Outcome {
  double out_err, lse_err;
  size_t inf_mismatch;
};

// One problem on the device: its inputs, poisoned outputs, launches and the comparison with the
// float64 reference, apart so that several cases can be in flight at once (on streams).
class DeviceCase {
 public:
  DeviceCase(const VariantKey& key, check::Problem pr, std::mt19937_64& rng)
      : pr_(with_key(key, pr)), scale_(1.f / std::sqrt(float(pr_.head_dim))),
        in_(check::make_inputs(pr_, rng)), q_(in_.q), k_(in_.k), v_(in_.v), bias_(in_.bias),
        aux_(in_.aux), qs_(in_.q_seg), ks_(in_.kv_seg), cq_(pr_.cu_q), ck_(pr_.cu_k),
        out_n_(pr_.total_q() * pr_.heads_q * pr_.head_dim),
        lse_n_(pr_.varlen ? pr_.heads_q * pr_.total_q() : pr_.batch * pr_.heads_q * pr_.seqlen_q),
        out_(out_n_ * 2), lse_(lse_n_ * 4) {
    p_ = FlashFwdParams{};
    p_.q = q_.as<void>(), p_.k = k_.as<void>(), p_.v = v_.as<void>(), p_.out = out_.as<void>();
    p_.lse = lse_.as<float>();
    p_.bias = pr_.bias ? bias_.as<void>() : nullptr;
    p_.softmax_aux = pr_.sinks ? aux_.as<float>() : nullptr;
    p_.q_segment_ids = pr_.segments ? qs_.as<i32>() : nullptr;
    p_.kv_segment_ids = pr_.segments ? ks_.as<i32>() : nullptr;
    p_.cu_seqlens_q = pr_.varlen ? cq_.as<i32>() : nullptr;
    p_.cu_seqlens_k = pr_.varlen ? ck_.as<i32>() : nullptr;
    p_ = check::params_for(pr_, p_, scale_);
  }

  // Poisons the outputs (NaN in bf16 and f16) and launches on `stream` with the launch shape of
  // a device of `sm_count` SMs (fewer than the device's: persistent blocks take more items).
  void launch(const VariantKey& key, cuda::LoadedKernel& kernel, const cuda::DeviceInfo& dev,
              int sm_count, cuda::CUstream stream = nullptr) {
    const cuda::CudaDriver& d = cuda::CudaDriver::get();
    d.check(d.cuMemsetD8(out_.ptr(), 0xff, out_n_ * 2), "poisoning out");
    d.check(d.cuMemsetD8(lse_.ptr(), 0xff, lse_n_ * 4), "poisoning lse");
    cuda::launch_flash_fwd(kernel,
                           cuda::flash_fwd_launch_shape(key.target, pr_.head_dim,
                                                        key.get_int("block_q"),
                                                        key.get_int("block_k"), p_, sm_count,
                                                        key.get_flag("per_item"),
                                                        key.get_flag("bias")),
                           p_, dev, stream, bias_copy_for(key));
  }

  // The errors of the last launch's results (synchronizes the context).
  Outcome outcome() const {
    const cuda::CudaDriver& d = cuda::CudaDriver::get();
    d.check(d.cuCtxSynchronize(), "running the kernel");
    std::vector<uint16_t> bits(out_n_);
    std::vector<float> lse_h(lse_n_);
    d.check(d.cuMemcpyDtoH(bits.data(), out_.ptr(), out_n_ * 2), "cuMemcpyDtoH");
    d.check(d.cuMemcpyDtoH(lse_h.data(), lse_.ptr(), lse_n_ * 4), "cuMemcpyDtoH");
    if (!ref_) ref_ = check::reference(pr_, in_, scale_);  // once per case: seconds of host time
    const check::Reference& ref = *ref_;
    std::vector<double> got(out_n_), got_lse(lse_h.begin(), lse_h.end());
    for (size_t i = 0; i < out_n_; ++i) got[i] = check::elem_to_f32(pr_, bits[i]);
    Outcome o{0, 0, 0};
    o.out_err = rel_l2(ref.out, got, &o.inf_mismatch);
    o.lse_err = rel_l2(ref.lse, got_lse, &o.inf_mismatch);
    return o;
  }

 private:
  static check::Problem with_key(const VariantKey& key, check::Problem pr) {
    pr.f16 = key.get_enum("dtype") == "f16";
    pr.head_dim = key.get_int("head_dim");
    pr.causal = key.get_flag("causal"), pr.window = key.get_flag("window");
    pr.softcap = key.get_flag("softcap"), pr.sinks = key.get_flag("sinks"), pr.bias = key.get_flag("bias");
    return pr;
  }

  check::Problem pr_;
  float scale_;
  check::HostInputs in_;
  DeviceBuffer q_, k_, v_, bias_, aux_, qs_, ks_, cq_, ck_;
  size_t out_n_, lse_n_;
  DeviceBuffer out_, lse_;
  FlashFwdParams p_;
  mutable std::optional<check::Reference> ref_;
};

Outcome run_case(const VariantKey& key, check::Problem pr, std::mt19937_64& rng,
                 const cuda::DeviceInfo& dev) {
  cuda::LoadedKernel kernel = load_kernel(key);
  DeviceCase c(key, pr, rng);
  c.launch(key, kernel, dev, dev.sm_count);
  return c.outcome();
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
  // 96, 160, 32 and 48: padded tiles on sm90a (head_dim up to a multiple of 64); 128 x 64 x 32
  // the sm80 family there.
  const int configs[][3] = {{64, 128, 64}, {128, 128, 128}, {128, 64, 32}, {96, 64, 64},
                            {256, 128, 64}, {64, 192, 128}, {160, 128, 64}, {32, 128, 128},
                            {48, 192, 64}};
  constexpr int kConfigs = int(std::size(configs));
  for (int i = 0; i < 2 * kConfigs; ++i) {
    VariantKey key = flash_schema().blank_key("cuda", dev.target);
    key.set_enum("dtype", rng() & 1 ? "bf16" : "f16");
    const auto& c = configs[i % kConfigs];
    if (c[1] == 192 && dev.target != "sm90a") continue;  // three consumer warpgroups: sm90a only
    key.set_int("head_dim", c[0]), key.set_int("block_q", c[1]), key.set_int("block_k", c[2]);
    for (const char* f : flags) key.set_flag(f, rng() % 2 == 0);
    // The schedule flag where the key may take it: every other wgmma-family key runs per item.
    key.set_flag("per_item", dev.target == "sm90a" && cuda::flash_fwd_uses_wgmma(true, c[0], c[1], c[2]) &&
                                 i % 2 == 1);
    check::Problem pr;
    pr.batch = 2, pr.heads_q = 4, pr.heads_kv = rng() & 1 ? 1 : 2;
    pr.seqlen_q = len(rng), pr.seqlen_k = len(rng);
    pr.window_left = win(rng), pr.window_right = win(rng), pr.cap = 8.f, pr.num_sinks = 2;
    pr.segments = i % 4 == 1;
    key.set_flag("segments", pr.segments);  // as the runtime keys it: the flag iff ids are given
    pr.normalize = i % 3 != 2;
    // Biases broadcast over heads or over query rows (stride 0; sm90a stages the latter in
    // 1-row boxes).
    pr.bias_bcast_h = i % 2 == 0, pr.bias_bcast_q = i % 3 == 0;
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

// Persistent causal blocks with item records draw their items from a counter per stream that
// every launch leaves zero (flash_fwd_sm90_schedule.cuh sm90_draw). Launches back to back on one
// stream must each find it zero, and launches in flight on two streams must not share one: an
// item drawn by the other launch would be missing here (NaN from the poison).
TEST_CASE("drawn work items: back to back on one stream and at once on two", "[device]") {
  std::string why;
  if (cuda::CudaDriver::load(&why) == nullptr) SKIP("no CUDA device: " + why);
  const cuda::DeviceInfo& dev = cuda::use_device(0);
  if (dev.target != "sm90a") SKIP("drawn items are an sm90a kernel feature; device target " + dev.target);
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed << ", device " << dev.name);
  std::mt19937_64 rng(seed);
  VariantKey key = flash_schema().blank_key("cuda", dev.target);
  key.set_enum("dtype", "bf16");
  key.set_int("head_dim", 128), key.set_int("block_q", 128), key.set_int("block_k", 128);
  key.set_flag("causal", true);  // persistent, two consumers: item records, drawn
  INFO(to_string(key));
  cuda::LoadedKernel kernel = load_kernel(key);
  check::Problem pr;
  pr.batch = 2, pr.heads_q = 4, pr.heads_kv = 2, pr.seqlen_q = pr.seqlen_k = 700, pr.normalize = true;
  // 6 q blocks x 8 heads x sequences = 48 items on grids of 5 and 3: every block draws ~10-16.
  DeviceCase a(key, pr, rng), b(key, pr, rng);
  const cuda::CudaDriver& d = cuda::CudaDriver::get();
  for (int round = 0; round < 3; ++round) {  // the legacy stream: each launch after the last
    a.launch(key, kernel, dev, 5);
    const Outcome o = a.outcome();
    CHECK(o.out_err <= 1e-2);
    CHECK(o.lse_err <= 1e-2);
    CHECK(o.inf_mismatch == 0);
  }
  cuda::CUstream s1 = nullptr, s2 = nullptr;
  d.check(d.cuStreamCreate(&s1, 1), "cuStreamCreate");  // 1: CU_STREAM_NON_BLOCKING
  d.check(d.cuStreamCreate(&s2, 1), "cuStreamCreate");
  for (int round = 0; round < 3; ++round) {
    a.launch(key, kernel, dev, 5, s1);
    b.launch(key, kernel, dev, 3, s2);
    d.check(d.cuStreamSynchronize(s1), "cuStreamSynchronize");
    d.check(d.cuStreamSynchronize(s2), "cuStreamSynchronize");
    for (const DeviceCase* c : {&a, &b}) {
      const Outcome o = c->outcome();
      CHECK(o.out_err <= 1e-2);
      CHECK(o.lse_err <= 1e-2);
      CHECK(o.inf_mismatch == 0);
    }
  }
  d.check(d.cuStreamDestroy(s1), "cuStreamDestroy");
  d.check(d.cuStreamDestroy(s2), "cuStreamDestroy");
}

// The runtime's bias copy (flash_fwd_bias_rows.cuh) on sources at every 2-byte alignment, odd
// and broadcast strides and key counts around the 8-key chunk: every row bit for bit, the keys
// past the row zero. The source buffers end at the last element read, so a read past the tensor
// shows under compute-sanitizer memcheck.
TEST_CASE("the bias copy keeps every row bit for bit at any alignment and stride", "[device]") {
  std::string why;
  if (cuda::CudaDriver::load(&why) == nullptr) SKIP("no CUDA device: " + why);
  const cuda::DeviceInfo& dev = cuda::use_device(0);
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed << ", device " << dev.name);
  std::mt19937_64 rng(seed);
  const cuda::LoadedKernel& copy = bias_copy(dev.target);
  const cuda::CudaDriver& d = cuda::CudaDriver::get();
  for (int64_t keys : {1, 2, 7, 8, 9, 15, 16, 17, 63, 64, 65, 255, 1001}) {
    for (int64_t offset = 0; offset < 8; ++offset) {  // elements past a 16-byte boundary
      // Plain rows with a gap; heads broadcast; rows broadcast.
      for (int layout = 0; layout < 3; ++layout) {
        FlashFwdBiasRows c{};
        const int64_t nb = 2, rows = layout == 2 ? 1 : 37;
        c.batches = nb, c.heads = layout == 1 ? 1 : 3, c.rows = rows, c.keys = keys;
        c.stride_q = layout == 2 ? 0 : keys + int64_t(rng() % 4);
        c.stride_h = layout == 1 ? 0 : rows * std::max<int64_t>(c.stride_q, keys) + int64_t(rng() % 3);
        c.stride_b = c.heads * std::max<int64_t>(c.stride_h, rows * std::max<int64_t>(c.stride_q, keys)) + 1;
        const int64_t rows_total = nb * c.heads * rows;
        c.pitch = flash_fwd_bias_pitch(keys);
        // The source ends at its last element: (nb-1, heads-1, rows-1, keys-1).
        const int64_t extent = (nb - 1) * c.stride_b + (c.heads - 1) * c.stride_h +
                               (rows - 1) * c.stride_q + keys;
        std::vector<uint16_t> host(size_t(offset + extent));
        for (auto& x : host) x = uint16_t(rng());
        DeviceBuffer src(host), dst(size_t(rows_total * c.pitch) * 2);
        d.check(d.cuMemsetD8(dst.ptr(), 0xff, size_t(rows_total * c.pitch) * 2), "poisoning dst");
        c.src = src.as<uint16_t>() + offset;
        c.dst = dst.as<uint16_t>();
        // A grid for one SM at odd offsets: each warp walks several rows.
        cuda::copy_bias_rows(copy, c, offset % 2 ? 1 : dev.sm_count);
        std::vector<uint16_t> got(size_t(rows_total * c.pitch));
        d.check(d.cuMemcpyDtoH(got.data(), dst.ptr(), got.size() * 2), "cuMemcpyDtoH");
        size_t wrong = 0;
        for (int64_t row = 0; row < rows_total; ++row) {
          const int64_t plane = row / rows, r = row % rows, b = plane / c.heads, h = plane % c.heads;
          const int64_t at = offset + b * c.stride_b + h * c.stride_h + r * c.stride_q;
          for (int64_t k = 0; k < c.pitch; ++k)
            wrong += got[size_t(row * c.pitch + k)] != (k < keys ? host[size_t(at + k)] : 0);
        }
        INFO("keys " << keys << " offset " << offset << " layout " << layout << " strides "
                     << c.stride_b << "/" << c.stride_h << "/" << c.stride_q);
        CHECK(wrong == 0);
      }
    }
  }
}

// A bias the kernel cannot read in place needs the copy: without it the launch is refused, by
// name, before anything runs (the pointers are never dereferenced).
TEST_CASE("a bias that needs the copy is refused without the copy kernel", "[device]") {
  std::string why;
  if (cuda::CudaDriver::load(&why) == nullptr) SKIP("no CUDA device: " + why);
  const cuda::DeviceInfo& dev = cuda::use_device(0);
  VariantKey key = flash_schema().blank_key("cuda", dev.target);
  key.set_enum("dtype", "bf16");
  key.set_int("head_dim", 64), key.set_int("block_q", 64), key.set_int("block_k", 32);
  key.set_flag("bias", true);
  cuda::LoadedKernel kernel = load_kernel(key);
  FlashFwdParams p{};
  auto addr = [](uintptr_t a) { return reinterpret_cast<void*>(a); };
  p.q = addr(0x100000), p.k = addr(0x200000), p.v = addr(0x300000), p.out = addr(0x400000);
  p.batch = 1, p.heads_q = p.heads_kv = 2, p.seqlen_q = 100, p.seqlen_k = 77, p.head_dim = 64;
  p.q_stride_s = p.k_stride_s = p.v_stride_s = p.o_stride_s = 2 * 64;
  p.q_stride_h = p.k_stride_h = p.v_stride_h = p.o_stride_h = 64;
  p.q_stride_b = p.o_stride_b = 100 * 2 * 64, p.k_stride_b = p.v_stride_b = 77 * 2 * 64;
  p.bias = addr(0x500002);  // 2 bytes past a 16-byte boundary, and 77 keys: an odd extent
  p.bias_stride_q = 77, p.bias_stride_h = 100 * 77, p.bias_stride_b = 2 * 100 * 77;
  const cuda::LaunchShape shape = cuda::flash_fwd_launch_shape(key.target, 64, 64, 32, p, dev.sm_count,
                                                               false, true);
  REQUIRE_FALSE(cuda::bias_reads_in_place(p, shape.bias_chunks));
  try {
    cuda::launch_flash_fwd(kernel, shape, p, dev);
    FAIL("launched without the bias copy");
  } catch (const InvalidArgument& e) {
    CHECK_THAT(e.what(), Catch::Matchers::ContainsSubstring("flash_fwd_bias_rows"));
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
