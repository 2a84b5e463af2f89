// Paged decode on tensor cores for 16-bit caches: one query token's rows (up to 16 heads of one
// kv head) over a contiguous run of cache positions. page_attention takes it (semantics:
// common/page_attention_params.h) where the head dim is a multiple of 16 (at most 256) and every
// cache row can be read in 16-byte chunks; the ragged family's one-token blocks take the same
// core (ragged_page.cuh) with their bias and sinks.
//
// One block of kPageThreads threads per (sequence, kv head, up to 16 query heads, split), the
// block index as page_attention.cuh's. The block's positions are streamed in tiles of kPageTile
// through a ring of kPageTcStages shared-memory stages of K and V filled by cp.async, so that
// kPageTcStages - 1 tiles are in flight while one is computed: decode is a stream of bytes, and
// the ring is what keeps the memory system busy. Warp w owns positions [16 w, 16 w + 16) of
// every tile: the group's query rows, padded to 16, times those 16 keys is one m16n8k16
// product pair per 16 of D (ldmatrix from the padded rows), the online softmax of its 16
// positions stays in registers (quad shuffles), and P V is another product on tensor cores.
// The four warps' states (max, sum, unnormalized output) are merged once at the end through
// the shared memory the stages used. Positions past the block's range load as zeros (cp.async
// zero fill) and are masked to -inf.
#pragma once
#include "ejk/kernels/common/page_attention_params.h"
#include "ejk/kernels/cuda/mma_frag.cuh"

namespace ejk::cuda {

template <int D> struct PageTcShape {
  static_assert(D % 16 == 0 && D <= 256, "the tensor-core decode takes D a multiple of 16, at most 256");
  static constexpr int kPitch = D + 8;  // shared row pitch, elements: 16 bytes of padding spread ldmatrix rows over the banks
  static constexpr int kChunks = D / 8;  // 16-byte chunks per row
  static constexpr int kWarps = kPageThreads / 32;
  static constexpr int kTileElems = kPageTile * kPitch;
  static constexpr int kDTiles = D / 8;
  static_assert(kPageTile == 16 * kWarps, "every warp takes 16 positions of a tile");
  static_assert(kPageMaxGroup == 16, "the query rows of a block are one m16 tile");
};

// One block's work for the core: positions [begin, end) of one sequence (its page table row),
// K and V rows of one kv head (position j at page * page_stride + (j % page_size) * slot_stride
// from k / v), and nh query rows (q + h * q_head).
struct DecodeRows {
  i64 begin, end;
  const i32* table;
  i32 last_page;
  u32 page_size;
  const u16 *k, *v;
  i64 k_page, k_slot, v_page, v_slot;
  const u16* q;
  i64 q_head;
  int nh;
  float scale, softcap;
};

// Issues the cp.async copies of tile positions [t0, t0 + n) into the stage's K and V rows;
// rows at or past n are zero-filled without reading the page table.
template <int D>
__device__ __forceinline__ void page_tc_load(const DecodeRows& w, u16* sk, u16* sv, i64 t0, int n) {
  using S = PageTcShape<D>;
  // page_block's lookup and clamp with 32-bit division (positions come from i32 lengths): the
  // 64-bit one is a long call, and every thread does it for each of its rows of every tile.
  const u32 bs = w.page_size;
  // Unrolled (kPageTile * kChunks is a multiple of kPageThreads: kChunks is even) so that the
  // table reads of a thread's rows are issued together, not one latency per row.
  static_assert(kPageTile * S::kChunks % kPageThreads == 0, "whole passes over the tile");
#pragma unroll
  for (int r = 0; r < kPageTile * S::kChunks / kPageThreads; ++r) {
    const int x = int(threadIdx.x) + r * kPageThreads, i = x / S::kChunks, c = x % S::kChunks;
    const bool valid = i < n;
    i64 ko = 0, vo = 0;
    if (valid) {
      const u32 j = u32(t0 + i), pg = j / bs, slot = j - pg * bs;
      const i64 blk = min_of(max_of(w.table[pg], 0), w.last_page);
      ko = blk * w.k_page + i64(slot) * w.k_slot + c * 8;
      vo = blk * w.v_page + i64(slot) * w.v_slot + c * 8;
    }
    cp_async_16(smem_addr(sk + i * S::kPitch + c * 8), w.k + ko, valid);
    cp_async_16(smem_addr(sv + i * S::kPitch + c * 8), w.v + vo, valid);
  }
}

// One warp's part of the tile at position t0: scores of the 16 query rows against keys
// [key0, key0 + 16) of the stage (key0 = 16 warp), plus bias(row, position) before the softcap,
// the online softmax update of m (log2 domain), the per-lane partial sums l and the output
// fragments o.
template <class Cfg, class Bias>
__device__ __forceinline__ void page_tc_tile(const DecodeRows& w, const Bias& bias, const u16* sq, const u16* sk,
                                             const u16* sv, i64 t0, int key0, int valid_keys, float (&m)[2],
                                             float (&l)[2], float (&o)[PageTcShape<Cfg::kD>::kDTiles][4]) {
  using S = PageTcShape<Cfg::kD>;
  constexpr float kLog2e = 1.4426950408889634f;
  const int lane = threadIdx.x % 32;
  float sc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
  for (int kk = 0; kk < Cfg::kD / 16; ++kk) {
    u32 a[4], b[4];
    frag_a(a, sq, S::kPitch, 0, kk * 16);
    frag_b_nk(b, sk, S::kPitch, key0, kk * 16);
    mma_16816<Cfg::E>(sc[0], a, b[0], b[1]);
    mma_16816<Cfg::E>(sc[1], a, b[2], b[3]);
  }
  // C fragment: sc[nt][e] is row lane / 4 + 8 (e / 2), key key0 + 8 nt + 2 (lane % 4) + e % 2.
#pragma unroll
  for (int nt = 0; nt < 2; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = key0 + 8 * nt + 2 * (lane % 4) + e % 2;
      float x = sc[nt][e] * w.scale + bias(lane / 4 + 8 * (e / 2), t0 + key);
      if (w.softcap > 0.0f) x = w.softcap * fast_tanh(x / w.softcap);
      sc[nt][e] = key < valid_keys ? x * kLog2e : neg_inf_f32();
    }
  online_softmax_tile<true>(sc, m, l, o);
  // P as the A operand of one k-step: the C layout of the two n8 tiles is the A layout.
  const u32 a[4] = {pack2<Cfg::E>(sc[0][0], sc[0][1]), pack2<Cfg::E>(sc[0][2], sc[0][3]),
                    pack2<Cfg::E>(sc[1][0], sc[1][1]), pack2<Cfg::E>(sc[1][2], sc[1][3])};
#pragma unroll
  for (int dp = 0; dp < Cfg::kD / 16; ++dp) {
    u32 b[4];
    frag_b_kn(b, sv, S::kPitch, key0, dp * 16);
    mma_16816<Cfg::E>(o[2 * dp], a, b[0], b[1]);
    mma_16816<Cfg::E>(o[2 * dp + 1], a, b[2], b[3]);
  }
}

// Merges the warps' states through shared memory `red` (the stages, no longer read) and hands
// rows [0, nh) to write(row, chunk c, y: elements [8 c, 8 c + 8) normalized by the row's sum,
// its max M (log2 domain), its sum L of exp2(x - M); L 0: no visible position, y 0).
template <class Cfg, class Write>
__device__ __forceinline__ void page_tc_finish(float* red, const float (&m)[2], float (&l)[2],
                                               const float (&o)[PageTcShape<Cfg::kD>::kDTiles][4], int nh,
                                               const Write& write) {
  using S = PageTcShape<Cfg::kD>;
  constexpr int kD = Cfg::kD;
  float* red_o = red;                                 // [warps][16][D], scaled to the merged row
  float* red_m = red_o + S::kWarps * 16 * kD;         // [warps][16]
  float* red_l = red_m + S::kWarps * 16;              // [warps][16]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] = quad_sum(l[r]);
    if (lane % 4 == 0) red_m[warp * 16 + lane / 4 + 8 * r] = m[r], red_l[warp * 16 + lane / 4 + 8 * r] = l[r];
  }
  __syncthreads();
  auto merged = [&](int row, float& mm, float& ll) {
    mm = neg_inf_f32(), ll = 0.0f;
    for (int w = 0; w < S::kWarps; ++w) mm = fmax_f32(mm, red_m[w * 16 + row]);
    if (mm == neg_inf_f32()) return;
    for (int w = 0; w < S::kWarps; ++w) ll += fast_exp2(red_m[w * 16 + row] - mm) * red_l[w * 16 + row];
  };
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = lane / 4 + 8 * r;
    float mm, ll;
    merged(row, mm, ll);
    const float f = ll > 0.0f ? fast_exp2(m[r] - mm) / ll : 0.0f;  // no visible position: 0
#pragma unroll
    for (int dt = 0; dt < S::kDTiles; ++dt)
#pragma unroll
      for (int e = 0; e < 2; ++e) red_o[(warp * 16 + row) * kD + dt * 8 + 2 * (lane % 4) + e] = o[dt][2 * r + e] * f;
  }
  __syncthreads();
  for (int x = threadIdx.x; x < 16 * S::kChunks; x += kPageThreads) {
    const int h = x / S::kChunks, c = x % S::kChunks;
    if (h >= nh) continue;
    float y[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      y[e] = 0.0f;
#pragma unroll
      for (int w = 0; w < S::kWarps; ++w) y[e] += red_o[(w * 16 + h) * kD + c * 8 + e];
    }
    float mm, ll;
    merged(h, mm, ll);
    write(h, c, y, mm, ll);
  }
}

// The core over one block's DecodeRows: bias and write as page_tc_tile and page_tc_finish take.
template <class Cfg, class Bias, class Write>
__device__ __forceinline__ void decode_tc(const DecodeRows& w, const Bias& bias, const Write& write) {
  using S = PageTcShape<Cfg::kD>;
  extern __shared__ __align__(16) unsigned char page_tc_smem[];
  u16* sq = reinterpret_cast<u16*>(page_tc_smem);  // [16][kPitch]
  u16* sk = sq + 16 * S::kPitch;                   // [stages][tile][kPitch]
  u16* sv = sk + kPageTcStages * S::kTileElems;    // [stages][tile][kPitch]
  const i64 begin = w.begin, end = max_of(w.begin, w.end);
  const int tiles = int((end - begin + kPageTile - 1) / kPageTile);

  // The first stages' copies go out before the query is staged, so that they overlap it.
#pragma unroll
  for (int t = 0; t < kPageTcStages - 1; ++t) {
    if (t < tiles) {
      const i64 t0 = begin + i64(t) * kPageTile;
      page_tc_load<Cfg::kD>(w, sk + t * S::kTileElems, sv + t * S::kTileElems, t0, int(min_of((i64)kPageTile, end - t0)));
    }
    cp_async_commit();  // empty groups keep the wait counts uniform
  }
  for (int x = threadIdx.x; x < 16 * Cfg::kD; x += kPageThreads) {
    const int h = x / Cfg::kD, d = x % Cfg::kD;
    sq[h * S::kPitch + d] = h < w.nh ? w.q[h * w.q_head + d] : u16(0);  // padding rows: zero scores, never written
  }

  const int warp = threadIdx.x / 32;
  float m[2] = {neg_inf_f32(), neg_inf_f32()}, l[2] = {0.0f, 0.0f};
  float o[S::kDTiles][4];
#pragma unroll
  for (int dt = 0; dt < S::kDTiles; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[dt][e] = 0.0f;

  for (int t = 0; t < tiles; ++t) {
    cp_async_wait<kPageTcStages - 2>();
    __syncthreads();  // tile t (and the query) visible to every warp; tile t - 1's stage is free
    const int ahead = t + kPageTcStages - 1;
    if (ahead < tiles) {
      const int st = ahead % kPageTcStages;
      const i64 t0 = begin + i64(ahead) * kPageTile;
      page_tc_load<Cfg::kD>(w, sk + st * S::kTileElems, sv + st * S::kTileElems, t0, int(min_of((i64)kPageTile, end - t0)));
    }
    cp_async_commit();
    const int st = t % kPageTcStages;
    const i64 t0 = begin + i64(t) * kPageTile;
    const int valid = int(min_of((i64)kPageTile, end - t0));
    page_tc_tile<Cfg>(w, bias, sq, sk + st * S::kTileElems, sv + st * S::kTileElems, t0, 16 * warp, valid, m, l, o);
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the stages: they hold the merge below
  page_tc_finish<Cfg>(reinterpret_cast<float*>(sk), m, l, o, w.nh, write);
}

struct NoDecodeBias {
  __device__ __forceinline__ float operator()(int, i64) const { return 0.0f; }
};

// A page_attention block's work: block index x = ((s * Hkv + g) * head_groups + hg) * splits +
// split; query heads [h0, h0 + nh) of kv head g, positions [begin, end) of sequence s.
struct PageBlock {
  i64 s, g, h0, split, begin, end;
  int nh;
};
__device__ __forceinline__ PageBlock page_block(const PageAttentionParams& p) {
  const i64 group = p.q_heads / p.kv_heads, head_groups = (group + kPageMaxGroup - 1) / kPageMaxGroup;
  i64 unit = blockIdx.x;
  PageBlock b;
  b.split = unit % p.splits;
  unit /= p.splits;
  const i64 hg = unit % head_groups;
  unit /= head_groups;
  b.g = unit % p.kv_heads, b.s = unit / p.kv_heads;
  b.h0 = b.g * group + hg * kPageMaxGroup;
  b.nh = int(min_of((i64)kPageMaxGroup, group - hg * kPageMaxGroup));
  const PageSpan span = page_span(p, b.s);
  b.begin = min_of(span.begin + b.split * p.split_tokens, span.end);
  b.end = min_of(b.begin + p.split_tokens, span.end);
  return b;
}

// page_attention's block: Cfg: E (bf16 or f16), kD. The caller checked page_uses_tc (p.vec set).
template <class Cfg>
__device__ __forceinline__ void page_decode_tc(const PageAttentionParams& p) {
  const PageBlock pb = page_block(p);
  const i64 s = pb.s, g = pb.g, h0 = pb.h0, split = pb.split;
  DecodeRows w;
  w.begin = pb.begin, w.end = pb.end;
  w.table = p.block_tables + s * p.bt_ss, w.last_page = i32(p.num_blocks - 1), w.page_size = u32(p.block_size);
  w.k = static_cast<const u16*>(p.k_cache) + g * p.k_sh, w.v = static_cast<const u16*>(p.v_cache) + g * p.v_sh;
  w.k_page = p.k_sb, w.k_slot = p.k_st, w.v_page = p.v_sb, w.v_slot = p.v_st;
  w.q = static_cast<const u16*>(p.q) + s * p.q_ss + h0 * p.q_sh, w.q_head = p.q_sh;
  w.nh = pb.nh;
  w.scale = p.scale, w.softcap = p.softcap;
  decode_tc<Cfg>(w, NoDecodeBias{}, [&](int h, int c, const float (&y)[8], float mm, float ll) {
    const i64 head = h0 + h;
    if (p.splits > 1) {
      const i64 row = (split * p.seqs + s) * p.q_heads + head;
      float* po = p.part_out + row * p.head_dim + c * 8;
#pragma unroll
      for (int e = 0; e < 8; ++e) po[e] = y[e];
      if (c == 0) p.part_lse[row] = ll > 0.0f ? (mm + log2f(ll)) * 0.6931471805599453f : neg_inf_f32();
    } else {
      u16* out = static_cast<u16*>(p.out) + s * p.o_ss + head * p.o_sh + c * 8;
#pragma unroll
      for (int e = 0; e < 8; e += 2) {
        const u32 v = pack2<Cfg::E>(y[e], y[e + 1]);
        out[e] = u16(v & 0xffffu), out[e + 1] = u16(v >> 16);
      }
    }
  });
}

}  // namespace ejk::cuda
