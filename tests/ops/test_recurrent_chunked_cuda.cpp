// The chunked tensor-core forward of recurrent_attention on CUDA (kernels/ejk/kernels/cuda/
// recurrent_chunk.cuh: 16-bit q, k, v, no g/gk/gv (g_gamma, g_head), K and V in {64, 128}): outputs and final
// states against the float64 reference, and against the token kernel on the same values (the
// inputs widened to f32, whose key runs the token kernel), over chunk edges (T = 1, 63, 64, 65,
// 1000), g_gamma, g_head, initial states, reverse and varlen with empty sequences. The chunked
// backward (recurrent_chunk_bwd.cuh, the same keys) likewise: every gradient, up to T = 4096.
#include <catch2/catch_test_macros.hpp>

#include "ejk/admin.h"
#include "recurrent_problem.h"

using namespace ejk;
using namespace recurrent_test;

namespace {

Device gpu() { return {DeviceKind::cuda, 0}; }

// The inputs of c (cu_seqlens too) copied to the GPU and its outputs' buffers there; `widen`
// turns 16-bit inputs and outputs into f32 tensors of the same layout and values.
struct GpuCall {
  Args args;
  std::vector<Tensor> keep, outputs;  // outputs: the storage of c.outputs on the GPU
  std::vector<Buffer> host_outputs;   // where the outputs come back (widened or not)
};

// An output's f32 twin is poisoned (0xff) as the original; an input's holds its values.
Buffer widened(const Buffer& b, bool output) {
  if (b.storage.dtype() == DType::f32) return b;
  Buffer w;
  w.storage = Tensor::empty({b.storage.numel()}, DType::f32);
  if (output) std::memset(w.storage.data(), 0xff, w.storage.nbytes());
  for (int64_t i = 0; i < b.storage.numel() && !output; ++i)
    w.storage.data_as<float>()[i] = float(element(b.storage, i));
  w.view = b.view;
  w.view.dtype = DType::f32;
  w.view.data = w.storage.data_as<float>() + (static_cast<const char*>(b.view.data) -
                                              static_cast<const char*>(b.storage.data())) /
                                                 int64_t(dtype_size(b.storage.dtype()));
  return w;
}

GpuCall to_gpu(const Call& c, bool reverse, bool widen) {
  GpuCall g;
  auto place = [&](const Buffer& src, bool output) {
    const Buffer b = widen ? widened(src, output) : src;
    g.keep.push_back(b.storage.to(gpu()));
    TensorView v = b.view;
    v.device = gpu();
    v.data = static_cast<char*>(g.keep.back().data()) +
             (static_cast<const char*>(b.view.data) - static_cast<const char*>(b.storage.data()));
    return std::make_pair(v, b);
  };
  for (const auto& [name, b] : c.inputs) g.args.set(name, place(b, false).first);
  for (const auto& [name, b] : c.outputs) {
    const auto [v, host] = place(b, true);
    g.args.set(name, v);
    g.outputs.push_back(g.keep.back()), g.host_outputs.push_back(host);
  }
  if (c.varlen) {
    g.keep.push_back(c.cu.to(gpu()));
    g.args.set("cu_seqlens", g.keep.back().view());
  }
  if (reverse) g.args.set("reverse", true);
  return g;
}

// Runs p's chunked key, then the token kernel on the same values; checks both against the
// float64 reference and each other (the forward, or with `backward` the backward).
void check_chunked(const Problem& p, uint64_t seed, bool backward = false) {
  const char* op = backward ? "recurrent_attention_backward" : "recurrent_attention";
  const double tol = backward ? 2e-2 : 1e-2;
  const Call c = make_call(p, backward, seed);
  GpuCall chunked = to_gpu(c, p.reverse, false), token = to_gpu(c, p.reverse, true);
  const RunInfo a = run(op, chunked.args);
  const RunInfo b = run(op, token.args);
  synchronize(gpu());
  const std::vector<ReferenceOutput> ref = reference(op, c.all(p.reverse));
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    const std::string& name = c.outputs[i].first;
    const auto r = std::find_if(ref.begin(), ref.end(), [&](const ReferenceOutput& x) { return x.name == name; });
    REQUIRE(r != ref.end());
    const Tensor got = chunked.outputs[i].to(Device{}), base = token.outputs[i].to(Device{});
    const Mismatch e = compare(chunked.host_outputs[i], got, r->values);
    const Mismatch t = compare(token.host_outputs[i], base, r->values);
    // The token kernel's outputs as the reference: chunked == token within the 16-bit tolerance.
    std::vector<double> token_values(r->values.size());
    for (size_t x = 0; x < token_values.size(); ++x) token_values[x] = element(base, kFence + int64_t(x));
    const Mismatch et = compare(chunked.host_outputs[i], got, token_values);
    INFO(fmt::format("{}: {} -> {} (token {}): rel_l2 {:.3e}, token {:.3e}, chunked vs token {:.3e}", name, p.name(),
                     a.key, b.key, e.rel_l2, t.rel_l2, et.rel_l2));
    CHECK_FALSE(e.nonfinite);
    CHECK(e.fence_intact);
    CHECK(e.rel_l2 <= tol);
    CHECK(t.rel_l2 <= tolerance(DType::f32, backward));  // the token kernel in f32 on the same values
    CHECK(et.rel_l2 <= tol);
  }
}

// Lengths on and around the 64-token chunk edges for K = V = 64 and 128, with g_gamma, g_head
// and the initial state (the backward: dht too) in each of their combinations over the lengths.
std::vector<Problem> edge_problems(bool backward) {
  std::vector<Problem> v;
  int n = 0;
  for (DType dtype : {DType::bf16, DType::f16})
    for (int64_t kv : {64, 128})
      for (int64_t t : {1, 63, 64, 65, 1000}) {
        Problem p;
        p.dtype = dtype, p.b = 2, p.t = t, p.h = 3, p.k = p.v = kv;
        p.gates = (n % 2 == 0 ? kGamma : 0) | (n % 3 != 1 ? kGh : 0), p.init = n / 2 % 2 == 0;
        if (backward) p.dht = n % 3 != 2;
        ++n;
        v.push_back(p);
      }
  return v;
}

}  // namespace

TEST_CASE("chunked recurrent attention on CUDA: chunk edges, g_gamma, initial state", "[recurrent][cuda][gpu]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  uint64_t seed = 900;
  for (const Problem& p : edge_problems(false)) check_chunked(p, seed++);
}

TEST_CASE("chunked recurrent attention on CUDA: reverse, varlen with empty sequences, K != V", "[recurrent][cuda][gpu]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  uint64_t seed = 950;
  for (DType dtype : {DType::bf16, DType::f16}) {
    Problem p;
    p.dtype = dtype, p.h = 3, p.k = 128, p.v = 64, p.gates = kGamma | kGh, p.init = true;
    p.varlen = true, p.b = 5, p.t = 1000;
    p.cu = {0, 0, 130, 130, 999, 1000};  // empty sequences first and in the middle, one of 1 token
    check_chunked(p, seed++);
    p.reverse = true;
    check_chunked(p, seed++);
    Problem d;  // dense reverse, K < V, chunk edges inside
    d.dtype = dtype, d.b = 2, d.t = 129, d.h = 3, d.k = 64, d.v = 128, d.reverse = true, d.init = true;
    check_chunked(d, seed++);
  }
}

TEST_CASE("chunked recurrent attention on CUDA: padded and token-major inputs take the plain loads", "[recurrent][cuda][gpu]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  uint64_t seed = 980;
  for (DType dtype : {DType::bf16, DType::f16}) {
    Problem p;  // rows 3 elements apart beyond the last dim: no 16-byte copies
    p.dtype = dtype, p.b = 2, p.t = 130, p.h = 3, p.k = p.v = 64, p.gates = kGamma, p.init = true;
    p.pad = 3, p.token_major = true;
    check_chunked(p, seed++);
    Problem v;  // packed [1, T, H, X] with a pad of 1, an empty sequence in the middle
    v.dtype = dtype, v.h = 2, v.k = 128, v.v = 64, v.varlen = true, v.leading_one = true, v.pad = 1, v.reverse = true;
    v.b = 3, v.t = 200, v.cu = {0, 70, 70, 200}, v.gates = kGh;
    check_chunked(v, seed++);
  }
}

TEST_CASE("chunked recurrent attention backward on CUDA: chunk edges, g_gamma, g_head, states, T = 4096",
          "[recurrent][cuda][gpu][backward]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  uint64_t seed = 1200;
  for (const Problem& p : edge_problems(true)) check_chunked(p, seed++, true);
  Problem p;  // a long sequence: 64 chunks, the carried state gradient through all of them
  p.dtype = DType::bf16, p.b = 1, p.t = 4096, p.h = 2, p.k = p.v = 128, p.gates = kGamma, p.init = p.dht = true;
  check_chunked(p, seed++, true);
  p.k = 64, p.reverse = true, p.dtype = DType::f16, p.gates = kGamma | kGh;
  check_chunked(p, seed++, true);
}

TEST_CASE("chunked recurrent attention backward on CUDA: reverse, varlen, K != V, plain loads",
          "[recurrent][cuda][gpu][backward]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  uint64_t seed = 1250;
  for (DType dtype : {DType::bf16, DType::f16}) {
    Problem p;
    p.dtype = dtype, p.h = 3, p.k = 128, p.v = 64, p.gates = kGamma | kGh, p.init = p.dht = true;
    p.varlen = true, p.b = 5, p.t = 1000;
    p.cu = {0, 0, 130, 130, 999, 1000};
    check_chunked(p, seed++, true);
    p.reverse = true;
    check_chunked(p, seed++, true);
    Problem d;  // dense reverse, K < V
    d.dtype = dtype, d.b = 2, d.t = 129, d.h = 3, d.k = 64, d.v = 128, d.reverse = true, d.dht = true;
    check_chunked(d, seed++, true);
    Problem m;  // padded token-major rows: the plain loads
    m.dtype = dtype, m.b = 2, m.t = 130, m.h = 2, m.k = m.v = 64, m.gates = kGh, m.init = true;
    m.pad = 3, m.token_major = true;
    check_chunked(m, seed++, true);
  }
}
