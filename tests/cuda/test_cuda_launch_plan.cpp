// The CUDA launch plan of flash_attention on the host, with no GPU (ops/flash_attention/
// flash_cuda.h): each key's family, grid, block and shared memory; the sm80 family's slices past
// the grid's limits; where a bias reads in place and what its copy needs; the sm90a tensor maps.
#include <catch2/catch_test_macros.hpp>

#include <array>
#include <initializer_list>
#include <vector>

#include "cuda_test_support.h"
#include "ejk/core/error.h"
#include "ejk/kernels/cuda/flash_fwd_traits.cuh"
#include "ops/flash_attention/flash_cuda.h"

namespace ejk::test {
namespace {

// The facts the launcher reads from a (spec-valid) key: its family from the target's `sm`.
ops::FlashKeyFacts facts(const char* target, int64_t d, int64_t bq, int64_t bk,
                         std::initializer_list<const char*> flags = {}) {
  return ops::flash_key_facts(flash_schema(), cuda_key(target, "bf16", d, bq, bk, flags));
}

ops::FlashLaunchShape shape(const char* target, int64_t d, int64_t bq, int64_t bk, const FlashFwdParams& p, int sms,
                            std::initializer_list<const char*> flags = {}) {
  return ops::flash_fwd_launch_shape(facts(target, d, bq, bk, flags), p, sms);
}

TEST_CASE("a key's facts: the family from its target's sm, its tile and flags", "[cuda]") {
  const ops::FlashKeyFacts a = facts("sm80", 128, 128, 64, {"causal", "bias"});
  CHECK_FALSE(a.wgmma);
  CHECK(a.bias);
  CHECK_FALSE(a.per_item);
  CHECK(a.head_dim == 128);
  CHECK(a.block_q == 128);
  CHECK(a.block_k == 64);
  const ops::FlashKeyFacts b = facts("sm90a", 64, 192, 128, {"per_item"});
  CHECK(b.wgmma);
  CHECK(b.per_item);
  CHECK_FALSE(b.bias);
  CHECK(b.block_q == 192);
  // The sm90a target with a tile the wgmma family does not take runs the sm80 family there.
  FlashFwdParams p{};
  p.batch = 1, p.heads_q = 2, p.seqlen_q = 100;
  CHECK_FALSE(shape("sm90a", 128, 128, 32, p, 132).tma);
  CHECK(shape("sm90a", 128, 128, 64, p, 132).tma);
}

TEST_CASE("launch shapes follow the kernel family of the key", "[cuda]") {
  FlashFwdParams p{};
  p.batch = 3, p.heads_q = 8, p.seqlen_q = 1000;
  const int sms = 132;
  const ops::FlashLaunchShape a = shape("sm80", 128, 128, 64, p, sms);
  CHECK(a.grid[0] == 8);  // ceil(1000 / 128)
  CHECK(a.grid[1] == 8);
  CHECK(a.grid[2] == 3);
  CHECK(a.block == 256);  // one warp per 16 query rows
  CHECK(a.smem_bytes == 2 * (128 + 4 * 64) * (128 + 8));  // padded rows
  CHECK_FALSE(a.tma);
  // sm90a, head_dim a multiple of 64: the wgmma family, a producer warpgroup + one consumer
  // warpgroup per 64 rows; swizzled unpadded tiles (Q, an O tile and 4 stages of K and V
  // here) + alignment + 176 B of mbarriers and the producer's item record. head_dim 128 with
  // room for the O tile: persistent, one block per SM while there are more work items (8 q
  // blocks x 8 heads x 3 sequences).
  const ops::FlashLaunchShape b = shape("sm90a", 128, 128, 64, p, sms);
  CHECK(b.block == 384);
  CHECK(b.smem_bytes == 1024 + 2 * (2 * 128 + 8 * 64) * 128 + 176);
  CHECK(b.tma);
  CHECK(b.grid[0] == 132);
  CHECK(b.grid[1] == 1);
  CHECK(b.grid[2] == 1);
  // 128 x 192 (2 stages, no room for an O tile): one block per work item, a 1-D grid.
  const ops::FlashLaunchShape w = shape("sm90a", 128, 128, 192, p, sms);
  CHECK(w.smem_bytes == 1024 + 2 * (128 + 4 * 192) * 128 + 176);
  CHECK(w.grid[0] == 192);
  CHECK(w.grid[1] == 1);
  // The boundary of the rule: 128 x 160 keeps its O tile beside two stages (persistent),
  // 128 x 176 has no room for it (one block per item, two stages).
  const ops::FlashLaunchShape b160 = shape("sm90a", 128, 128, 160, p, sms);
  CHECK(b160.smem_bytes == 1024 + 2 * (2 * 128 + 4 * 160) * 128 + 176);
  CHECK(b160.grid[0] == 132);
  const ops::FlashLaunchShape b176 = shape("sm90a", 128, 128, 176, p, sms);
  CHECK(b176.smem_bytes == 1024 + 2 * (128 + 4 * 176) * 128 + 176);
  CHECK(b176.grid[0] == 192);
  // head_dim 64 with a block that fills more than half an SM's shared memory (block_q 192,
  // 4 stages of 128 keys, and the O tile): persistent, one block per SM while there are more
  // work items (6 * 8 * 3 = 144) than SMs.
  const ops::FlashLaunchShape e = shape("sm90a", 64, 192, 128, p, sms);
  CHECK(e.block == 512);
  CHECK(e.smem_bytes == 1024 + 2 * (2 * 192 + 8 * 128) * 64 + 176);
  CHECK(e.grid[0] == 132);
  CHECK(e.grid[1] == 1);
  CHECK(e.grid[2] == 1);
  // The same key with `.items` (per_item): one block per work item, no O tile.
  const ops::FlashLaunchShape ei = shape("sm90a", 64, 192, 128, p, sms, {"per_item"});
  CHECK(ei.block == 512);
  CHECK(ei.smem_bytes == 1024 + 2 * (192 + 8 * 128) * 64 + 176);
  CHECK(ei.grid[0] == 144);
  CHECK(ops::flash_fwd_smem_bytes(facts("sm90a", 64, 192, 128, {"per_item"})) == ei.smem_bytes);
  CHECK(ops::flash_fwd_smem_bytes(facts("sm90a", 64, 192, 128)) == e.smem_bytes);
  // head_dim 64, block_k 64 (4 stages, 82 KiB: two blocks fit an SM): one block per work item.
  const ops::FlashLaunchShape d = shape("sm90a", 64, 128, 64, p, sms);
  CHECK(d.grid[0] == 192);
  CHECK(d.grid[1] == 1);
  CHECK(d.grid[2] == 1);
  // head_dim 256 (2 stages): one block per work item too.
  const ops::FlashLaunchShape c = shape("sm90a", 256, 128, 64, p, sms);
  CHECK(c.smem_bytes == 1024 + 2 * (128 + 4 * 64) * 256 + 176);
  CHECK(c.grid[0] == 192);
  CHECK(c.grid[1] == 1);
  CHECK(c.grid[2] == 1);
  {  // more sequences than gridDim.z allows: the wgmma family's 1-D grid takes them, the sm80
     // family (sequences on gridDim.z) runs slices of at most 65535
    FlashFwdParams many = p;
    many.batch = 70000;
    CHECK(shape("sm90a", 128, 128, 192, many, sms).grid[0] == 8 * 8 * 70000);
    CHECK(shape("sm90a", 128, 128, 192, many, sms).launches() == 1);
    const ops::FlashLaunchShape m = shape("sm80", 128, 128, 64, many, sms);
    CHECK(m.grid[1] == 8);
    CHECK(m.grid[2] == 65535);
    CHECK(m.launches() == 2);
    // heads past gridDim.y with GQA 7:1: slices of whole groups (9362 * 7 = 65534 heads)
    many.batch = 2, many.heads_q = 70000, many.heads_kv = 10000;
    const ops::FlashLaunchShape h = shape("sm80", 128, 128, 64, many, sms);
    CHECK(h.grid[1] == 65534);
    CHECK(h.grid[2] == 2);
    CHECK(h.launches() == 2);
    CHECK(shape("sm80", 128, 128, 64, p, sms).launches() == 1);
  }
  p.batch = 1;  // 48 work items: a persistent grid has one block each
  CHECK(shape("sm90a", 64, 192, 128, p, sms).grid[0] == 48);
  CHECK(shape("sm90a", 64, 64, 128, p, sms).block == 256);
  // head_dim no multiple of 64: the wgmma family on tiles of the next multiple (d96 as d128,
  // d48 as d64, three consumers too); the sm80 family where block_k < 64
  const ops::FlashLaunchShape d96 = shape("sm90a", 96, 128, 64, p, sms);
  CHECK(d96.tma);
  CHECK(d96.block == 384);
  CHECK(d96.smem_bytes == shape("sm90a", 128, 128, 64, p, sms).smem_bytes);
  CHECK(shape("sm90a", 160, 128, 64, p, sms).smem_bytes ==
        shape("sm90a", 192, 128, 64, p, sms).smem_bytes);
  CHECK(shape("sm90a", 48, 128, 64, p, sms).tma);
  CHECK(shape("sm90a", 16, 192, 128, p, sms).smem_bytes ==
        shape("sm90a", 64, 192, 128, p, sms).smem_bytes);
  CHECK_FALSE(shape("sm90a", 48, 128, 32, p, sms).tma);
  CHECK(shape("sm90a", 48, 128, 32, p, sms).smem_bytes ==
        2 * (128 + 4 * 32) * (48 + 8));
  // Tiles no family builds (keys the spec rejects too): three consumers above head_dim 64, a
  // head_dim no multiple of 16.
  CHECK_THROWS_AS(ops::flash_fwd_launch_shape(ops::FlashKeyFacts{.wgmma = true, .head_dim = 96, .block_q = 192,
                                                                 .block_k = 128}, p, sms),
                  InvalidArgument);
  CHECK_THROWS_AS(ops::flash_fwd_launch_shape(ops::FlashKeyFacts{.head_dim = 72, .block_q = 128, .block_k = 64}, p, sms),
                  InvalidArgument);
}

TEST_CASE("an sm80 launch slice sees its heads and sequences only", "[cuda]") {
  // Fake addresses: the slice only moves pointers (2-byte elements, f32 lse and sinks).
  auto addr = [](uintptr_t a) { return reinterpret_cast<void*>(a); };
  FlashFwdParams p{};
  p.q = addr(0x100000), p.k = addr(0x200000), p.v = addr(0x300000), p.out = addr(0x400000);
  p.lse = static_cast<float*>(addr(0x500000));
  p.bias = addr(0x600000);
  p.softmax_aux = static_cast<const float*>(addr(0x700000));
  p.q_segment_ids = static_cast<const i32*>(addr(0x800000));
  p.kv_segment_ids = static_cast<const i32*>(addr(0x900000));
  p.batch = 10, p.heads_q = 12, p.heads_kv = 4, p.num_sinks = 3;
  p.q_stride_b = 1000, p.q_stride_h = 10, p.k_stride_b = 2000, p.k_stride_h = 20;
  p.v_stride_b = 3000, p.v_stride_h = 30, p.o_stride_b = 4000, p.o_stride_h = 40;
  p.sinks_stride_h = 3;  // [Hq, num_sinks]
  p.lse_stride_b = 500, p.lse_stride_h = 50, p.bias_stride_b = 600, p.bias_stride_h = 60;
  p.q_seg_stride_b = 70, p.kv_seg_stride_b = 80;
  auto bytes = [](const void* a, const void* b) {
    return static_cast<const char*>(a) - static_cast<const char*>(b);
  };
  // heads 6..8 (kv head 2), sequences 4..8
  const FlashFwdParams s = ops::flash_fwd_slice(p, 6, 3, 4, 5);
  CHECK(s.heads_q == 3);
  CHECK(s.heads_kv == 1);
  CHECK(s.batch == 5);
  CHECK(bytes(s.q, p.q) == 2 * (6 * 10 + 4 * 1000));
  CHECK(bytes(s.k, p.k) == 2 * (2 * 20 + 4 * 2000));
  CHECK(bytes(s.v, p.v) == 2 * (2 * 30 + 4 * 3000));
  CHECK(bytes(s.out, p.out) == 2 * (6 * 40 + 4 * 4000));
  CHECK(s.lse - p.lse == 6 * 50 + 4 * 500);
  CHECK(bytes(s.bias, p.bias) == 2 * (6 * 60 + 4 * 600));
  CHECK(s.softmax_aux - p.softmax_aux == 6 * 3);
  // shared sinks ([num_sinks], stride 0): every slice reads the same ones
  FlashFwdParams shared = p;
  shared.sinks_stride_h = 0;
  CHECK(ops::flash_fwd_slice(shared, 6, 3, 4, 5).softmax_aux == p.softmax_aux);
  CHECK(s.q_segment_ids - p.q_segment_ids == 4 * 70);
  CHECK(s.kv_segment_ids - p.kv_segment_ids == 4 * 80);
  // varlen: the packed tensors stay put (their rows come from cu_seqlens, absolute offsets)
  const i32 cu_q[11] = {}, cu_k[11] = {};
  p.cu_seqlens_q = cu_q, p.cu_seqlens_k = cu_k;
  const FlashFwdParams v = ops::flash_fwd_slice(p, 6, 3, 4, 5);
  CHECK(v.cu_seqlens_q == cu_q + 4);
  CHECK(v.cu_seqlens_k == cu_k + 4);
  CHECK(bytes(v.q, p.q) == 2 * 6 * 10);
  CHECK(bytes(v.k, p.k) == 2 * 2 * 20);
  CHECK(bytes(v.out, p.out) == 2 * 6 * 40);
  CHECK(v.lse - p.lse == 6 * 50);
  CHECK(bytes(v.bias, p.bias) == 2 * (6 * 60 + 4 * 600));
  // absent optional tensors stay absent
  p.bias = nullptr, p.softmax_aux = nullptr, p.q_segment_ids = nullptr, p.kv_segment_ids = nullptr;
  const FlashFwdParams n = ops::flash_fwd_slice(p, 6, 3, 4, 5);
  CHECK(n.bias == nullptr);
  CHECK(n.softmax_aux == nullptr);
  CHECK(n.q_segment_ids == nullptr);
  CHECK(n.kv_segment_ids == nullptr);
}

TEST_CASE("the kernels read a bias as it is only where its pairs or chunks of keys are aligned", "[cuda]") {
  FlashFwdParams p{};
  CHECK(ops::bias_reads_in_place(p, false));  // no bias
  CHECK(ops::bias_reads_in_place(p, true));
  p.bias = reinterpret_cast<void*>(uintptr_t(0x600000));
  p.seqlen_k = 512, p.bias_stride_q = 512, p.bias_stride_h = 512 * 512, p.bias_stride_b = 0;
  CHECK(ops::bias_reads_in_place(p, false));
  CHECK(ops::bias_reads_in_place(p, true));
  SECTION("an odd key extent: pairs would read the last key's pair past the row; chunks stop at it") {
    p.seqlen_k = 777, p.bias_stride_q = 784;
    CHECK_FALSE(ops::bias_reads_in_place(p, false));
    CHECK(ops::bias_reads_in_place(p, true));
  }
  SECTION("an odd row, head or batch stride") {
    p.bias_stride_q = 513;
    CHECK_FALSE(ops::bias_reads_in_place(p, false));
    CHECK_FALSE(ops::bias_reads_in_place(p, true));
    p.bias_stride_q = 512, p.bias_stride_h = 3;
    CHECK_FALSE(ops::bias_reads_in_place(p, false));
    p.bias_stride_h = 0, p.bias_stride_b = 1;
    CHECK_FALSE(ops::bias_reads_in_place(p, false));
  }
  SECTION("even strides that are no multiple of 8: pairs only") {
    p.seqlen_k = 514, p.bias_stride_q = 514, p.bias_stride_h = 514 * 512;
    CHECK(ops::bias_reads_in_place(p, false));
    CHECK_FALSE(ops::bias_reads_in_place(p, true));
  }
  SECTION("a base 2 bytes past a 4-byte boundary, or 4 bytes past a 16-byte one") {
    p.bias = reinterpret_cast<void*>(uintptr_t(0x600002));
    CHECK_FALSE(ops::bias_reads_in_place(p, false));
    p.bias = reinterpret_cast<void*>(uintptr_t(0x600004));
    CHECK(ops::bias_reads_in_place(p, false));
    CHECK_FALSE(ops::bias_reads_in_place(p, true));
  }
  SECTION("the copy's scratch: nothing in place, else whole rows of a pitch of 8 keys per kept axis") {
    CHECK(ops::bias_copy_bytes(p, false) == 0);
    p.batch = 3, p.heads_q = 5, p.seqlen_q = 7, p.seqlen_k = 777, p.bias_stride_q = 777;
    p.bias_stride_h = 7 * 777, p.bias_stride_b = 0;  // broadcast over the batch: one plane per head
    CHECK(ops::bias_copy_bytes(p, false) == 5 * 7 * 784 * 2);
    p.bias_stride_q = 0;  // one row per head
    CHECK(ops::bias_copy_bytes(p, true) == 5 * 784 * 2);
  }
  SECTION("varlen (kernel tests only): the longest sequence's keys count, not the packed total") {
    const i32 cu[2] = {};
    p.cu_seqlens_q = p.cu_seqlens_k = cu;
    p.total_k = 1001, p.seqlen_k = 512;
    CHECK(ops::bias_reads_in_place(p, false));
    p.seqlen_k = 511;
    CHECK_FALSE(ops::bias_reads_in_place(p, false));
  }
}

TEST_CASE("sm90a bias keys stage the bias in shared memory where it fits", "[cuda]") {
  // head_dim 64 and 128 at 128 x 128 (and 64 at 192 x 128): the rows fit beside the ring.
  for (auto [d, bq, bk] : {std::array<int64_t, 3>{128, 128, 128}, {64, 128, 128}, {64, 192, 128}}) {
    INFO("d" << d << " bq" << bq << " bk" << bk);
    const cuda::FlashFwdLaunchFacts plain = cuda::flash_fwd_launch_facts(true, d, bq, bk);
    const cuda::FlashFwdLaunchFacts bias = cuda::flash_fwd_launch_facts(true, d, bq, bk, false, true);
    CHECK_FALSE(plain.bias_chunks);
    CHECK(bias.bias_chunks);
    // The boxes start 1 KiB past the barriers, 848 bytes past the item record (the warps' bias
    // barriers sit in that gap).
    CHECK(bias.smem_bytes == plain.smem_bytes + 848 + bq * bk * 2);
    CHECK(bias.smem_bytes <= cuda::kMaxSmemSm90);
  }
  // head_dim 256: no room; the kernel reads pairs from global memory, the launch is unchanged.
  const cuda::FlashFwdLaunchFacts d256 = cuda::flash_fwd_launch_facts(true, 256, 128, 80, false, true);
  CHECK_FALSE(d256.bias_chunks);
  CHECK(d256.smem_bytes == cuda::flash_fwd_launch_facts(true, 256, 128, 80).smem_bytes);
  // sm80 keys read pairs.
  CHECK_FALSE(cuda::flash_fwd_launch_facts(false, 128, 128, 64, false, true).bias_chunks);
  // What a bias key launches with, through its facts as the runtime reads them from the key.
  FlashFwdParams p{};
  p.batch = 1, p.heads_q = 8, p.seqlen_q = 1000;
  const ops::FlashLaunchShape staged = shape("sm90a", 128, 128, 128, p, 132, {"bias"});
  CHECK(staged.bias_chunks);
  CHECK(staged.smem_bytes == cuda::flash_fwd_launch_facts(true, 128, 128, 128, false, true).smem_bytes);
  CHECK_FALSE(shape("sm80", 128, 128, 64, p, 132, {"bias"}).bias_chunks);
  CHECK_FALSE(shape("sm90a", 128, 128, 128, p, 132).bias_chunks);
}

TEST_CASE("a staged bias's tensor map drops broadcast axes and boxes one warp's rows", "[cuda]") {
  FlashFwdParams p{};
  p.bias = reinterpret_cast<void*>(uintptr_t(0x600000));
  p.batch = 3, p.heads_q = 5, p.seqlen_q = 700, p.seqlen_k = 777;
  p.bias_stride_q = 784, p.bias_stride_h = 700 * 784, p.bias_stride_b = 5 * 700 * 784;
  using cuda::FlashTensor;
  const cuda::FlashFwdSm90Geometry g{128, 128, 128};
  SECTION("a full bias: every axis, 16-row boxes, byte strides") {
    const cuda::TmaTensorView v = cuda::flash_fwd_tma_view(p, FlashTensor::bias, g);
    CHECK(v.base == p.bias);
    CHECK(std::vector<u64>(v.dims, v.dims + 4) == std::vector<u64>{777, 700, 5, 3});
    CHECK(std::vector<u64>(v.strides, v.strides + 3) ==
          std::vector<u64>{2 * 784, 2 * 700 * 784, 2 * 5 * 700 * 784});
    CHECK(std::vector<u32>(v.box, v.box + 4) == std::vector<u32>{64, 16, 1, 1});
  }
  SECTION("broadcast rows, heads and batch: size 1, a legal stride, 1-row boxes") {
    p.bias_stride_q = p.bias_stride_h = p.bias_stride_b = 0;
    const cuda::TmaTensorView v = cuda::flash_fwd_tma_view(p, FlashTensor::bias, g);
    CHECK(std::vector<u64>(v.dims, v.dims + 4) == std::vector<u64>{777, 1, 1, 1});
    CHECK(std::vector<u64>(v.strides, v.strides + 3) == std::vector<u64>{16, 16, 16});
    CHECK(std::vector<u32>(v.box, v.box + 4) == std::vector<u32>{64, 1, 1, 1});
  }
  SECTION("the bias map is encoded only for a key that stages it, with a bias") {
    CHECK(cuda::flash_fwd_tensors(p, true).size == 5);
    CHECK(cuda::flash_fwd_tensors(p, false).size == 4);
    p.bias = nullptr;
    CHECK(cuda::flash_fwd_tensors(p, true).size == 4);
  }
}

}  // namespace
}  // namespace ejk::test
