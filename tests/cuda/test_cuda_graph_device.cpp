// The public API under CUDA graph capture: a plan's run (and a plain run whose plan and workspace
// exist) is captured on a stream in global mode, where any synchronisation or device-to-host copy
// would fail the capture, and replaying the graph on new data matches the float64 reference. A
// call whose stream workspace would have to grow during a capture is refused by name.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <dlfcn.h>

#include <cstring>

#include "device_case.h"
#include "ejk/core/error.h"
#include "ejk/op.h"

namespace ejk::test {
namespace {

// The graph entry points, which the library never needs, resolved here from the driver.
struct GraphApi {
  using Graph = void*;
  using GraphExec = void*;
  cuda::CUresult (*begin)(cuda::CUstream, int mode);
  cuda::CUresult (*end)(cuda::CUstream, Graph*);
  cuda::CUresult (*instantiate)(GraphExec*, Graph, unsigned long long flags);
  cuda::CUresult (*launch)(GraphExec, cuda::CUstream);
  cuda::CUresult (*destroy_exec)(GraphExec);
  cuda::CUresult (*destroy)(Graph);

  static const GraphApi& get() {
    static const GraphApi api = [] {
      void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
      REQUIRE(lib != nullptr);
      GraphApi a{};
      auto sym = [&](auto& fn, const char* name) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
        INFO(name);
        REQUIRE(fn != nullptr);
      };
      sym(a.begin, "cuStreamBeginCapture_v2");
      sym(a.end, "cuStreamEndCapture");
      sym(a.instantiate, "cuGraphInstantiateWithFlags");
      sym(a.launch, "cuGraphLaunch");
      sym(a.destroy_exec, "cuGraphExecDestroy");
      sym(a.destroy, "cuGraphDestroy");
      return a;
    }();
    return api;
  }
};
constexpr int kCaptureModeGlobal = 0;  // CU_STREAM_CAPTURE_MODE_GLOBAL

uint16_t to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return uint16_t((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);  // round to nearest even
}
double from_bf16(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::vector<uint16_t> random_bf16(size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = to_bf16(u(rng));
  return v;
}

// One causal GQA problem with q, k, v, out and lse on the device and copies of the inputs on the
// host, for the reference.
struct GraphCase {
  static constexpr int64_t B = 2, S = 300, Hq = 4, Hkv = 2, D = 128;
  std::vector<uint16_t> q, k, v;
  DeviceBuffer dq, dk, dv, dout, dlse;

  explicit GraphCase(std::mt19937_64& rng)
      : q(random_bf16(B * S * Hq * D, rng)), k(random_bf16(B * S * Hkv * D, rng)), v(random_bf16(B * S * Hkv * D, rng)),
        dq(q), dk(k), dv(v), dout(q.size() * 2), dlse(size_t(B * Hq * S) * 4) {}

  TensorView view(const DeviceBuffer& buf, Dims shape, DType t) const {
    TensorView x;
    x.data = buf.as<void>(), x.dtype = t, x.device = {DeviceKind::cuda, 0};
    x.shape = shape, x.strides = contiguous_strides(shape);
    return x;
  }
  Args args() const {
    Args a;
    a.set("q", view(dq, {B, S, Hq, D}, DType::bf16)).set("k", view(dk, {B, S, Hkv, D}, DType::bf16));
    a.set("v", view(dv, {B, S, Hkv, D}, DType::bf16)).set("out", view(dout, {B, S, Hq, D}, DType::bf16));
    a.set("lse", view(dlse, {B, Hq, S}, DType::f32)).set("causal", true);
    return a;
  }
  // New query values, written into the same device memory the graph reads.
  void refill_q(std::mt19937_64& rng, cuda::CUstream stream) {
    q = random_bf16(q.size(), rng);
    const cuda::CudaDriver& d = cuda::CudaDriver::get();
    d.check(d.cuStreamSynchronize(stream), "cuStreamSynchronize");
    d.check(d.cuMemcpyHtoD(dq.ptr(), q.data(), q.size() * 2), "cuMemcpyHtoD");
    d.check(d.cuCtxSynchronize(), "cuCtxSynchronize");  // a pageable copy may return before it lands
  }
  void poison(cuda::CUstream stream) const {
    const cuda::CudaDriver& d = cuda::CudaDriver::get();
    d.check(d.cuMemsetD8Async(dout.ptr(), 0xff, q.size() * 2, stream), "cuMemsetD8Async");  // NaN in bf16
  }
  // rel-L2 of out against the float64 reference of the host inputs.
  double error() const {
    Args a;
    auto host = [](const std::vector<uint16_t>& data, Dims shape) {
      TensorView x;
      x.data = const_cast<uint16_t*>(data.data()), x.dtype = DType::bf16, x.shape = shape;
      x.strides = contiguous_strides(shape);
      return x;
    };
    a.set("q", host(q, {B, S, Hq, D})).set("k", host(k, {B, S, Hkv, D})).set("v", host(v, {B, S, Hkv, D}));
    a.set("causal", true);
    const std::vector<ReferenceOutput> ref = reference("flash_attention", a);
    const std::vector<uint16_t> got = to_host<uint16_t>(dout.ptr(), q.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double r = ref[0].values[i], g = from_bf16(got[i]);
      num += (g - r) * (g - r), den += r * r;
    }
    return std::sqrt(num / den);  // NaN (a poisoned element left) fails every comparison
  }
};

}  // namespace

TEST_CASE("a plan's run and a warm run are captured into a CUDA graph and replay on new data", "[device]") {
  device_or_skip();
  const cuda::CudaDriver& d = cuda::CudaDriver::get();
  const GraphApi& g = GraphApi::get();
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  cuda::CUstream stream = nullptr;
  d.check(d.cuStreamCreate(&stream, 1), "cuStreamCreate");  // non-blocking
  GraphCase c(rng);
  Context ctx;
  ctx.stream = stream;
  const Args args = c.args();
  const Plan plan = ejk::plan("flash_attention", args, ctx);  // loads the variant, reserves the workspace

  GraphApi::Graph graph = nullptr;
  d.check(g.begin(stream, kCaptureModeGlobal), "cuStreamBeginCapture");
  plan.run(args, ctx);
  ejk::run("flash_attention", args, ctx);  // same call: its plan is the one above
  d.check(g.end(stream, &graph), "cuStreamEndCapture");
  GraphApi::GraphExec exec = nullptr;
  d.check(g.instantiate(&exec, graph, 0), "cuGraphInstantiateWithFlags");

  for (int replay = 0; replay < 3; ++replay) {
    c.refill_q(rng, stream);
    c.poison(stream);
    d.check(g.launch(exec, stream), "cuGraphLaunch");
    d.check(d.cuStreamSynchronize(stream), "cuStreamSynchronize");
    const double err = c.error();
    INFO("replay " << replay << ": rel-L2 " << err);
    CHECK(err <= 1e-2);
  }
  d.check(g.destroy_exec(exec), "cuGraphExecDestroy");
  d.check(g.destroy(graph), "cuGraphDestroy");
  d.check(d.cuStreamDestroy(stream), "cuStreamDestroy");
}

TEST_CASE("a call whose stream workspace must grow during a capture is refused by name", "[device]") {
  device_or_skip();
  if (device_target() != "sm90a") SKIP("the work counter is an sm90a kernel feature; device target " + device_target());
  const cuda::CudaDriver& d = cuda::CudaDriver::get();
  const GraphApi& g = GraphApi::get();
  std::mt19937_64 rng(fresh_seed());
  cuda::CUstream stream = nullptr;  // a fresh stream: no workspace yet
  d.check(d.cuStreamCreate(&stream, 1), "cuStreamCreate");
  GraphCase c(rng);
  Context other;  // the variant is loaded through another stream, so only the workspace is missing
  ejk::plan("flash_attention", c.args(), other);
  Context ctx;
  ctx.stream = stream;
  d.check(g.begin(stream, kCaptureModeGlobal), "cuStreamBeginCapture");
  CHECK_THROWS_WITH(ejk::run("flash_attention", c.args(), ctx),
                    Catch::Matchers::ContainsSubstring("captured into a CUDA graph") &&
                        Catch::Matchers::ContainsSubstring("ejk::plan()"));
  GraphApi::Graph graph = nullptr;
  g.end(stream, &graph);  // an empty (or invalidated) capture; either way nothing ran
  if (graph != nullptr) g.destroy(graph);
  // Outside the capture the same call grows the workspace and runs.
  c.poison(stream);
  ejk::run("flash_attention", c.args(), ctx);
  d.check(d.cuStreamSynchronize(stream), "cuStreamSynchronize");
  CHECK(c.error() <= 1e-2);
  d.check(d.cuStreamDestroy(stream), "cuStreamDestroy");
}

}  // namespace ejk::test
