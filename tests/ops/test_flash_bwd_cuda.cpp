// flash_attention_backward on CUDA against the float64 reference: the features of the forward
// in combinations, bf16 and f16, every gradient within 2e-2 with poisoned outputs; two runs
// bit-identical. Skips where no GPU can run.
#include <catch2/catch_test_macros.hpp>

#include <fmt/format.h>

#include <cstring>

#include "ejk/admin.h"
#include "flash_bwd_gpu.h"

using namespace flash_bwd_test;

namespace {

constexpr const char* kOp = "flash_attention_backward";
// block_q, block_k: the tile shape to run (0: the heuristic's).
void check_problem(const Problem& p, uint64_t seed, int64_t block_q = 0, int64_t block_k = 0) {
  const Case c = make_case(p, seed, kGpu);
  OnGpu g = to_gpu(c);
  if (block_q > 0) g.args.tune("block_q", block_q).tune("block_k", block_k);
  const RunInfo info = run(kOp, g.args);
  if (block_q > 0) CHECK(info.key.find(fmt::format(".bq{}.bk{}", block_q, block_k)) != std::string::npos);
  synchronize(kGpu);
  check_gpu_gradients(p, c, g, info.key);
}

}  // namespace

TEST_CASE("flash attention backward on CUDA matches the float64 reference", "[flash_bwd][cuda][gpu]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  using W = std::array<int64_t, 2>;
  std::vector<Problem> v(13);
  for (Problem& p : v) p.dtype = DType::bf16, p.sq = 100, p.sk = 90;
  v[0].d = 128, v[0].causal = true;                                                        // a built-in key
  v[1].d = 64, v[1].sinks = SinkKind::per_head, v[1].softcap = 3.0, v[1].hq = 6, v[1].hkv = 2;
  v[2].window = W{9, 4}, v[2].bias = BiasKind::shared_batch, v[2].sinks = SinkKind::shared, v[2].d_lse = true;
  v[3].segments = true, v[3].bias = BiasKind::full, v[3].causal = true;
  v[4].varlen = true, v[4].b = 3, v[4].sq = 150, v[4].sk = 140, v[4].causal = true, v[4].hq = 4, v[4].hkv = 1;
  v[5].dtype = DType::f16, v[5].d = 96, v[5].bias = BiasKind::shared_both, v[5].window = W{20, 0};
  v[6].d = 256, v[6].bias = BiasKind::shared_heads, v[6].softcap = 20.0, v[6].sinks = SinkKind::per_head;
  v[7].d = 128, v[7].b = 1, v[7].sq = 700, v[7].sk = 650, v[7].hq = 4, v[7].hkv = 4;  // many tiles
  // The tensor-core kernels (no bias): each feature without the scalar kernel's bias path.
  v[8].window = W{9, 4}, v[8].sinks = SinkKind::shared, v[8].d_lse = true, v[8].sq = 300, v[8].sk = 280;
  v[9].segments = true, v[9].causal = true, v[9].sq = 200, v[9].sk = 200;
  v[10].dtype = DType::f16, v[10].d = 96, v[10].window = W{20, 0}, v[10].softcap = 5.0;
  v[11].d = 256, v[11].softcap = 20.0, v[11].sinks = SinkKind::per_head, v[11].hq = 4, v[11].hkv = 1;
  v[12].d = 64, v[12].causal = true, v[12].sq = 333, v[12].sk = 517, v[12].hq = 8, v[12].hkv = 2;
  uint64_t seed = 900;
  for (const Problem& p : v) check_problem(p, seed++);
}

// On sm90a the keys without bias, dropout or dense mask at head_dim 64 and 128 run the wgmma
// kernels (flash_bwd_sm90.cuh; elsewhere these run the mma.sync ones): each tile shape, with
// ragged tiles (lengths no multiple of 128), GQA, and every feature they take.
namespace {
void check_tile_shape(int64_t block_q, int64_t block_k, uint64_t seed) {
  using W = std::array<int64_t, 2>;
  std::vector<Problem> v(6);
  for (Problem& p : v) p.dtype = DType::bf16, p.sq = 333, p.sk = 301, p.hq = 4, p.hkv = 2;
  v[0].d = 128;
  v[1].d = 64, v[1].causal = true, v[1].hq = 6, v[1].hkv = 1;
  v[2].d = 128, v[2].window = W{40, 7}, v[2].softcap = 4.0, v[2].sinks = SinkKind::per_head, v[2].d_lse = true;
  v[3].d = 64, v[3].segments = true, v[3].causal = true, v[3].sinks = SinkKind::shared;
  v[4].d = 128, v[4].varlen = true, v[4].b = 3, v[4].sq = 200, v[4].sk = 260, v[4].causal = true;
  v[5].dtype = DType::f16, v[5].d = 64, v[5].varlen = true, v[5].b = 2, v[5].sq = 190, v[5].sk = 150,
  v[5].window = W{30, 30}, v[5].softcap = 2.5;
  for (const Problem& p : v) check_problem(p, seed++, block_q, block_k);
}
}  // namespace

TEST_CASE("flash attention backward on CUDA: 64-query tiles of the sm90a kernels", "[flash_bwd][cuda][gpu]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  check_tile_shape(64, 64, 1300);
  check_tile_shape(64, 128, 1310);
}

TEST_CASE("flash attention backward on CUDA: 128-query tiles of the sm90a kernels", "[flash_bwd][cuda][gpu]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  check_tile_shape(128, 64, 1320);
  check_tile_shape(128, 128, 1330);
}

namespace {
void check_deterministic(const Problem& p) {
  const Case c = make_case(p, 3, kGpu);
  OnGpu a = to_gpu(c), b = to_gpu(c);
  run(kOp, a.args);
  run(kOp, b.args);
  synchronize(kGpu);
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    const Tensor x = a.outputs[i].second.to(Device{}), y = b.outputs[i].second.to(Device{});
    INFO(a.outputs[i].first);
    CHECK(std::memcmp(x.data(), y.data(), x.nbytes()) == 0);
  }
}
}  // namespace

TEST_CASE("flash attention backward on CUDA is deterministic", "[flash_bwd][cuda][gpu]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  Problem p;
  p.dtype = DType::bf16, p.d = 128, p.b = 2, p.sq = 300, p.sk = 300, p.hq = 8, p.hkv = 2, p.causal = true;
  p.bias = BiasKind::shared_batch, p.sinks = SinkKind::shared;
  check_deterministic(p);  // the scalar kernel (bias)
  p.bias = BiasKind::none;
  check_deterministic(p);  // the tensor-core kernels (sm90a: wgmma)
  p.d = 64, p.hkv = 8, p.causal = false, p.window = std::array<int64_t, 2>{50, 50}, p.segments = true;
  check_deterministic(p);
}
