// The CUDA dense mask's tile summary (kernels/ejk/kernels/cuda/flash_mask_tiles.cuh) run on the CPU
// through cuda_emu/'s stand-in (a std::thread per CUDA thread, block votes over a shared word),
// against a brute-force classification of every tile; and the walks the CUDA kernels take over it
// (forward and dQ: key tiles of a query tile; dK/dV: head-major query steps of a key tile) against
// the tiles a brute force finds not hidden; and the per-pair mask of partial tiles (mask_dense,
// flash_dense_mask.cuh) in the mma.sync C fragment layout the emulator's mma_16816 writes. Masks
// with hidden rows and tiles, densities 0, 0.3 and 1, broadcast batch and head dims, sequence
// lengths that are no multiple of the tiles.
#include <catch2/catch_test_macros.hpp>

#include <random>
#include <thread>
#include <vector>

#include "ejk/kernels/cuda/flash_dense_mask.cuh"
#include "ejk/kernels/cuda/flash_mask_tiles.cuh"


using namespace ejk;
using namespace ejk::cuda;

namespace {

struct Shape {
  i64 b, h, sq, sk, bq, bk;
  bool shared_b, shared_h;
  double density;
};

// The summary of mask m by the kernel, one block after another on kMaskTilesThreads threads, the
// grid split over x and y as the runtime does past its x limit (here: 7 blocks a row).
std::vector<u8> run_kernel(const FlashFwdParams& p, i64 bq, i64 bk) {
  FlashMaskTiles t = flash_mask_tiles_of(p, bq, bk);
  const i64 tiles = t.batches * t.heads * t.q_tiles * t.k_tiles;
  std::vector<u8> out(size_t(tiles), 0xee);
  t.tiles = out.data();
  gridDim = {7, unsigned((tiles + 6) / 7), 1};
  emu::use_smem(nullptr, 0);
  for (unsigned y = 0; y < gridDim.y; ++y)
    for (unsigned x = 0; x < gridDim.x; ++x) emu::run_block(kMaskTilesThreads, {x, y}, [&] { flash_mask_tiles(t); });
  return out;
}

u8 brute_class(const FlashFwdParams& p, i64 b, i64 h, i64 qt, i64 kt, i64 bq, i64 bk) {
  bool any = false, all = true;
  for (i64 q = qt * bq; q < std::min((qt + 1) * bq, p.seqlen_q); ++q)
    for (i64 k = kt * bk; k < std::min((kt + 1) * bk, p.seqlen_k); ++k) {
      const bool v = dense_mask_visible(flash_mask_row(p, b, h, q), k);
      any |= v, all &= v;
    }
  return !any ? kMaskTileHidden : all ? kMaskTileVisible : kMaskTilePartial;
}

void check_shape(const Shape& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution visible(s.density);
  const i64 mb = s.shared_b ? 1 : s.b, mh = s.shared_h ? 1 : s.h;
  std::vector<u8> mask(size_t(mb * mh * s.sq * s.sk));
  for (size_t i = 0; i < mask.size(); ++i) {
    const i64 q = i64(i) / s.sk % s.sq, k = i64(i) % s.sk;
    // Row 2 hidden; keys [bk, 2 bk) hidden from every query: whole tiles.
    mask[i] = q == 2 || (k >= s.bk && k < 2 * s.bk) ? 0 : visible(rng) ? u8(1 + rng() % 255) : 0;
  }
  FlashFwdParams p{};
  p.dense_mask = mask.data();
  p.batch = s.b, p.heads_q = s.h, p.seqlen_q = s.sq, p.seqlen_k = s.sk;
  p.mask_stride_q = s.sk;
  p.mask_stride_h = s.shared_h ? 0 : s.sq * s.sk;
  p.mask_stride_b = s.shared_b ? 0 : mh * s.sq * s.sk;
  const std::vector<u8> tiles = run_kernel(p, s.bq, s.bk);
  p.mask_tiles = tiles.data();
  const i64 nq = ceil_div(s.sq, s.bq), nk = ceil_div(s.sk, s.bk);
  for (i64 b = 0; b < s.b; ++b)
    for (i64 h = 0; h < s.h; ++h) {
      for (i64 qt = 0; qt < nq; ++qt) {
        std::vector<int> want, got;
        for (i64 kt = 0; kt < nk; ++kt) {
          const u8 c = brute_class(p, b, h, qt, kt, s.bq, s.bk);
          REQUIRE(flash_mask_tile(p, b, h, qt, kt, s.bq, s.bk) == c);
          if (c != kMaskTileHidden) want.push_back(int(kt));
        }
        const DenseKeyTileWalk walk{{0, int(nk)}, &p, b, h, qt, s.bq, s.bk};
        for (int t = walk.first(); !walk.done(t); t = walk.next(t)) {
          got.push_back(t);
          REQUIRE(walk.partial(t) == (brute_class(p, b, h, qt, t, s.bq, s.bk) == kMaskTilePartial));
        }
        REQUIRE(got == want);
      }
      if (h % 2 != 0) continue;
      // dK/dV: a group of two heads from h, every query tile of each, head-major.
      for (i64 kt = 0; kt < nk; ++kt) {
        std::vector<i64> want, got;
        for (i64 step = 0; step < 2 * nq; ++step)
          if (h + step / nq < s.h && brute_class(p, b, h + step / nq, step % nq, kt, s.bq, s.bk) != kMaskTileHidden)
            want.push_back(step);
        if (h + 1 >= s.h) continue;
        const DenseQueryStepWalk walk{{0, int(nq)}, 2 * nq, &p, b, h, kt, s.bq, s.bk};
        for (i64 st = walk.first(); !walk.done(st); st = walk.next(st)) got.push_back(st);
        REQUIRE(got == want);
      }
    }
}

}  // namespace

TEST_CASE("the CUDA dense mask summary and its walks match brute force", "[kernels][dmask][emu]") {
  uint64_t seed = 1;
  check_shape({2, 2, 77, 90, 32, 16, false, false, 0.3}, seed++);
  check_shape({2, 4, 64, 64, 64, 32, true, false, 1.0}, seed++);
  check_shape({1, 2, 50, 130, 16, 32, false, true, 0.0}, seed++);
  check_shape({3, 2, 33, 47, 16, 16, true, true, 0.9}, seed++);
}

TEST_CASE("the CUDA per-pair dense mask hides exactly the hidden pairs of its fragments", "[kernels][dmask][emu]") {
  // block_q 64 (4 warps of 16 rows), block_k 64; the last tile cut by the sequence ends.
  using C = FlashFwdSm80Config<Elem::bf16, 64, 64, 64, AttentionFlags{.dense_mask = true}>;
  const i64 sq = 100, sk = 90, heads = 2;
  std::mt19937_64 rng(11);
  std::vector<u8> mask(size_t(heads * sq * sk));
  for (auto& m : mask) m = rng() % 3 == 0 ? 0 : u8(1 + rng() % 255);
  FlashFwdParams p{};
  p.dense_mask = mask.data();
  p.batch = 1, p.heads_q = heads, p.heads_kv = heads, p.seqlen_q = sq, p.seqlen_k = sk;
  p.mask_stride_h = sq * sk, p.mask_stride_q = sk;
  const SeqSpan seq{0, 0, 0, sq, 0, sk};
  int checked = 0;
  for (i64 h = 0; h < heads; ++h)
    for (i64 q0 : {i64(0), i64(64)})
      for (i64 k0 : {i64(0), i64(64)})
        for (int warp = 0; warp < C::kThreads / 32; ++warp)
          for (int lane = 0; lane < 32; ++lane) {
            const int warp_row0 = warp * C::kMTiles * 16;
            const TileContext<C> ctx = tile_context<C>(p, seq, h, q0, warp_row0, lane);
            float s[C::kMTiles][C::kNTiles][4] = {};
            mask_dense<C>(s, p, ctx, seq, h, k0, lane);
            for (int mt = 0; mt < C::kMTiles; ++mt)
              for (int nt = 0; nt < C::kNTiles; ++nt)
                for (int e = 0; e < 4; ++e) {
                  // mma_16816's C layout (cuda_emu ptx.cuh): row lane / 4 + 8 (e >= 2), column 2 (lane % 4) + e % 2.
                  const i64 q = q0 + warp_row0 + mt * 16 + lane / 4 + 8 * (e >= 2);
                  const i64 k = k0 + nt * 8 + 2 * (lane % 4) + (e & 1);
                  const bool hidden = q < sq && k < sk && mask[size_t((h * sq + q) * sk + k)] == 0;
                  REQUIRE((s[mt][nt][e] == -INFINITY) == hidden);
                  checked += hidden;
                }
          }
  CHECK(checked > 1000);
}
