// nsa_selection_attention's forward on the CUDA backend through the public API: random
// selections (own, earlier, later and repeated blocks, empty slots), block counts, GQA groups of
// 1 to 20 heads (two warps' worth of rows), partial tiles, bf16 and f16, head dims 64 and 128,
// against the float64 reference; then the CUDA backward (dq, dk, dv, with d_lse in some) from the
// GPU forward's out and lse against the float64 gradients, run twice to the same bits (no
// order-dependent sums), and the CPU backward from the same outputs. Skips with the reason when
// no GPU can run here.
#include <catch2/catch_test_macros.hpp>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "blocksparse_problem.h"
#include "ejk/admin.h"
#include "ejk/core/error.h"
#include "ejk/op.h"

using namespace ejk;
using namespace ejk::test;

namespace {

constexpr Device kGpu{DeviceKind::cuda, 0};

void require_gpu() {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
}

struct Nsa {
  int64_t b = 1, t = 300, hq = 4, hkv = 2, d = 64, s = 4, bs = 64;
  bool counts = false;
  DType dtype = DType::bf16;
};

std::map<std::string, Tensor> make(const Nsa& p, std::mt19937_64& rng) {
  std::map<std::string, Tensor> t;
  t["q"] = random_tensor({p.b, p.t, p.hq, p.d}, p.dtype, rng);
  t["k"] = random_tensor({p.b, p.t, p.hkv, p.d}, p.dtype, rng);
  t["v"] = random_tensor({p.b, p.t, p.hkv, p.d}, p.dtype, rng);
  Tensor idx = Tensor::empty({p.b, p.t, p.hkv, p.s}, DType::i32);
  const int64_t blocks = (p.t + p.bs - 1) / p.bs;
  std::uniform_int_distribution<int32_t> any(-1, int32_t(blocks));
  for (int64_t row = 0; row < p.b * p.t * p.hkv; ++row)
    for (int64_t s = 0; s < p.s; ++s)
      idx.data_as<int32_t>()[row * p.s + s] = s == 0 ? int32_t(row / p.hkv % p.t / p.bs) : s == 2 ? idx.data_as<int32_t>()[row * p.s] : any(rng);
  t["block_indices"] = idx;
  if (p.counts) {
    Tensor c = Tensor::empty({p.b, p.t, p.hkv}, DType::i32);
    std::uniform_int_distribution<int32_t> count(0, int32_t(p.s));
    for (int64_t i = 0; i < c.numel(); ++i) c.data_as<int32_t>()[i] = count(rng);
    t["block_counts"] = c;
  }
  return t;
}

}  // namespace

TEST_CASE("the CUDA forward and backward match the float64 reference", "[nsa][cuda]") {
  require_gpu();
  std::mt19937_64 rng(20261203);
  std::vector<Nsa> problems;
  for (DType dt : {DType::bf16, DType::f16}) {
    Nsa a;
    a.dtype = dt;
    problems.push_back(a);
    Nsa b;  // 20 heads per kv head: two row tasks, the second of 4 heads; counts; d128
    b.t = 200, b.hq = 20, b.hkv = 1, b.d = 128, b.s = 5, b.counts = true, b.dtype = dt;
    problems.push_back(b);
    Nsa c;  // blocks of 96 keys: two tiles each, the second partial
    c.b = 2, c.t = 250, c.hq = 2, c.hkv = 2, c.bs = 96, c.s = 3, c.dtype = dt;
    problems.push_back(c);
  }
  for (const Nsa& p : problems) {
    INFO("t " << p.t << " hq " << p.hq << " hkv " << p.hkv << " d " << p.d << " bs " << p.bs << " "
              << dtype_name(p.dtype));
    std::map<std::string, Tensor> host = make(p, rng);
    Args cpu, gpu;
    std::vector<Tensor> keep;
    for (auto& [name, t] : host) {
      cpu.set(name, t.view());
      keep.push_back(t.to(kGpu));
      gpu.set(name, keep.back().view());
    }
    cpu.set("block_size", p.bs), gpu.set("block_size", p.bs);
    Tensor out = Tensor::empty({p.b, p.t, p.hq, p.d}, p.dtype), lse = Tensor::empty({p.b, p.t, p.hq}, DType::f32);
    std::memset(out.data(), 0xff, out.nbytes());
    std::memset(lse.data(), 0xff, lse.nbytes());
    Tensor g_out = out.to(kGpu), g_lse = lse.to(kGpu);
    gpu.set("out", g_out.view()).set("lse", g_lse.view());
    const RunInfo info = run("nsa_selection_attention", gpu);
    synchronize(kGpu);
    CHECK(info.backend == Backend::cuda);
    out = g_out.to(Device{}), lse = g_lse.to(Device{});
    const auto refs = reference("nsa_selection_attention", cpu);
    CHECK(rel_l2(values_of(out), ref_of(refs, "out")) <= 1e-2);
    CHECK(rel_l2(values_of(lse), ref_of(refs, "lse")) <= 1e-2);
    // The backward from the GPU forward's outputs: on the GPU (twice, to the same bits), and on
    // the CPU (its f16 keys are JIT-only).
    Tensor d_out = random_tensor(out.shape(), p.dtype, rng);
    Args ref_args = cpu;
    ref_args.set("out", out.view()).set("lse", lse.view()).set("d_out", d_out.view());
    Tensor d_lse = random_tensor(lse.shape(), DType::f32, rng);
    if (p.counts) ref_args.set("d_lse", d_lse.view());
    const auto grefs = reference("nsa_selection_attention_backward", ref_args);
    Tensor g_d_out = d_out.to(kGpu), g_d_lse = d_lse.to(kGpu);
    Args gbwd = gpu;
    gbwd.set("out", g_out.view()).set("lse", g_lse.view()).set("d_out", g_d_out.view());
    if (p.counts) gbwd.set("d_lse", g_d_lse.view());
    std::map<std::string, std::vector<double>> first;
    for (int pass = 0; pass < 2; ++pass) {
      std::map<std::string, Tensor> grads;
      for (const auto& [name, like] : {std::pair{"dq", "q"}, std::pair{"dk", "k"}, std::pair{"dv", "v"}}) {
        Tensor g = Tensor::empty(host[like].shape(), p.dtype);
        std::memset(g.data(), 0xff, g.nbytes());  // NaN in bf16 and f16
        grads[name] = g.to(kGpu);
        gbwd.set(name, grads[name].view());
      }
      const RunInfo binfo = run("nsa_selection_attention_backward", gbwd);
      synchronize(kGpu);
      CHECK(binfo.backend == Backend::cuda);
      for (auto& [name, g] : grads) {
        const std::vector<double> got = values_of(g.to(Device{}));
        INFO("cuda " << name << " pass " << pass << " rel-L2 " << rel_l2(got, ref_of(grefs, name)));
        CHECK(rel_l2(got, ref_of(grefs, name)) <= 2e-2);
        if (pass == 0) first[name] = got;
        else CHECK(got == first[name]);
      }
    }
    if (p.dtype == DType::f16 && !cpu_jit_available()) continue;
    Args bwd = ref_args;
    std::map<std::string, Tensor> grads;
    grads["dq"] = Tensor::empty(host["q"].shape(), p.dtype);
    grads["dk"] = Tensor::empty(host["k"].shape(), p.dtype);
    grads["dv"] = Tensor::empty(host["v"].shape(), p.dtype);
    for (auto& [name, g] : grads) bwd.set(name, g.view());
    run("nsa_selection_attention_backward", bwd);
    for (auto& [name, g] : grads) {
      INFO("cpu " << name);
      CHECK(rel_l2(values_of(g), ref_of(grefs, name)) <= 2e-2);
    }
  }
}
