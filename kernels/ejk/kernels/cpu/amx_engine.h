// The bf16 engine of the CPU flash kernel on Intel AMX tiles. Same data flow as FmaEngine
// (scores transposed, S^T[key][query], so the softmax of task.h is shared), with bf16 tile
// products accumulating in float32:
//     S^T (BK x BQ)  = K (BK x D, packed rows) . Q^T (VNNI pairs of d, packed once per task)
//     O   (BQ x D)  += P (BQ x keys, bf16) . V (VNNI pairs of keys)
// The products are blocked 2 x 2 on the 8 tile registers: tmm0-3 accumulate, tmm4-5 hold the
// left operand, tmm6-7 the right one.
//
// O lives in memory (16 tiles at 128 x 128), so each P.V pass loads and stores it. To load it
// less often, P and V of several kv blocks collect in a window and P.V runs over the whole
// window; the softmax's reference max moves only when a block's max exceeds it by more than
// kRescaleThreshold, so blocks of one window share it. When it does move, the window so far is
// flushed and O rescaled. (On Sapphire/Emerald Rapids the tile unit does not run beside
// AVX-512 work, so the phases simply follow each other.)
#pragma once
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/flash_params.h"
#include "ejk/kernels/cpu/amx.h"
#include "ejk/kernels/cpu/task.h"
#include "ejk/kernels/cpu/tiles.h"
#include "ejk/kernels/cpu/types.h"
#include "ejk/kernels/cpu/vec.h"

#if EJK_CPU_AMX
namespace ejk::cpu {

template <class Cfg> struct AmxEngine {
  static constexpr int BQ = Cfg::block_q, BK = Cfg::block_k, D = Cfg::head_dim;
  static constexpr int T = amx::kTileRows;  // 16
  // Tiles pair up 32 bf16 along every reduced axis and are blocked 2 x 2.
  static constexpr bool kSupported =
      Cfg::elem == ElemKind::bf16 && D % 32 == 0 && BQ % 32 == 0 && BK % 32 == 0;

  // P.V runs over up to kWindowKeys keys at a time (whole blocks). 128 keys won on this CPU:
  // larger windows halve o's traffic again but no longer fit P and V in L1.
  static constexpr int kWindowKeys = BK > 128 ? BK : 128 / BK * BK;
  static constexpr int kWindowChunks = kWindowKeys / 32;
  // p = exp(logit - m) stays below e^8 between moves of m: no precision lost in bf16 or f32.
  static constexpr float kRescaleThreshold = 8.0f;

  alignas(64) u16 qv[D * BQ];           // Q^T as VNNI pairs of d       (D/2, BQ, 2) bf16
  alignas(64) u16 kb[BK * D];           // K block, zero rows to the tile edge (BK, D) bf16
  alignas(64) u16 vv[kWindowKeys * D];  // V window as VNNI pairs of keys (keys/2, D, 2) bf16
  alignas(64) float st[BK * BQ];        // scores                       (BK, BQ)
  alignas(64) u16 pb[BQ * kWindowKeys]; // P window                     (BQ, keys) bf16
  alignas(64) float o[BQ * D];          // output accumulator           (BQ, D)
  const u16* ka;                        // the block's K rows for the tiles: kb, or K itself
  int window_begin, window_end;         // 32-key chunks of the window not yet in o

  EJK_HD static void begin_range() { amx::configure(); }
  EJK_HD static void end_range() { amx::release(); }

  EJK_HD void begin_task(const FlashFwdParams& p, const TaskGeometry& g) {
    pack_q(static_cast<const u16*>(p.q) + g.q_off, p.q_stride_s, g.rows);
    for (int i = 0; i < BQ * D; ++i) o[i] = 0.0f;
    window_begin = window_end = 0;
  }

  EJK_HD void process_block(const FlashFwdParams& p, const TaskGeometry& g, TaskState<Cfg>& ts,
                            const KvBlock& blk) {
    const int chunks = (blk.kn + 31) / 32;  // 32-key chunks that hold the block's keys
    if (window_end + chunks > kWindowChunks) {
      accumulate_output(window_begin, window_end);
      window_begin = window_end = 0;
    }
    // Tiles read K in place when its rows are adjacent (head-major, as the runtime stages it)
    // and the block fills whole tiles. Otherwise K is copied: tile loads of rows that are pages
    // apart stall while the copy streams, and the copy pads a ragged end with zeros.
    const u16* k_rows = static_cast<const u16*>(p.k) + g.k_off + blk.k0 * p.k_stride_s;
    if (p.k_stride_s == D && blk.kn == chunks * 32) {
      ka = k_rows;
    } else {
      pack_k(k_rows, p.k_stride_s, blk.kn, chunks * 32);
      ka = kb;
    }
    pack_v(static_cast<const u16*>(p.v) + g.v_off + blk.k0 * p.v_stride_s, p.v_stride_s, blk.kn,
           window_end * 16, chunks * 16);
    BlockPrefetcher next = block_prefetcher<Cfg>(p, g, blk.k0 + BK, blk.next_kn);
    scores(chunks * 2, next);
    const bool rescale = scores_to_probabilities<Cfg, /*kScale=*/true>(
        p, g, ts, st, blk, kRescaleThreshold, PackProbabilities{this, window_end * 32});
    if (rescale) {  // the window so far belongs to the old reference max
      accumulate_output(window_begin, window_end);
      rescale_output(ts.softmax.alpha);
      window_begin = window_end;
    }
    window_end += chunks;
  }

  EJK_HD void finish_task() {
    accumulate_output(window_begin, window_end);
    window_begin = window_end = 0;
  }

  EJK_HD const float* out_row(int i) const { return o + i * D; }

 private:
  // qv32[p][i] = (q[i][2p], q[i][2p+1]) for the block's rows, zero pairs for padding rows.
  EJK_HD void pack_q(const u16* q, i64 q_stride, int rows) {
    u32* out = reinterpret_cast<u32*>(qv);
    for (int i0 = 0; i0 < BQ; i0 += 16)
      for (int p0 = 0; p0 < D / 2; p0 += 16) {
        amx::v16u r[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i) {
          r[i] = amx::v16u{};
          if (i0 + i < rows) __builtin_memcpy(&r[i], q + (i0 + i) * q_stride + 2 * p0, 64);
        }
        amx::transpose16(r);
#pragma GCC unroll 16
        for (int p = 0; p < 16; ++p) __builtin_memcpy(out + (p0 + p) * BQ + i0, &r[p], 64);
      }
  }

  // K rows as stored; rows [kn, rows_to_fill) zero so whole tiles stay finite.
  EJK_HD void pack_k(const u16* k, i64 k_stride, int kn, int rows_to_fill) {
    for (int j = 0; j < kn; ++j) __builtin_memcpy(kb + j * D, k + j * k_stride, D * sizeof(u16));
    for (int j = kn; j < rows_to_fill; ++j)
      for (int d = 0; d < D; ++d) kb[j * D + d] = 0;
  }

  // vv[first_pair + t][d] = (v[2t][d], v[2t+1][d]) for t < pairs; keys past kn are zero.
  EJK_HD void pack_v(const u16* v, i64 v_stride, int kn, int first_pair, int pairs) {
    for (int t = 0; t < pairs; ++t) {
      const int j = 2 * t;
      for (int d0 = 0; d0 < D; d0 += 16) {
        amx::v16u16 a{}, b{};
        if (j < kn) __builtin_memcpy(&a, v + j * v_stride + d0, sizeof a);
        if (j + 1 < kn) __builtin_memcpy(&b, v + (j + 1) * v_stride + d0, sizeof b);
        const amx::v32u16 pair = amx::interleave_bf16(a, b);
        __builtin_memcpy(vv + ((first_pair + t) * D + d0) * 2, &pair, sizeof pair);
      }
    }
  }

  // st[j][i] = dot(k[j], q[i]) for the first key_tiles * 16 keys.
  EJK_HD void scores(int key_tiles, BlockPrefetcher& next) {
    constexpr i64 kK = D * sizeof(u16), kQ = BQ * 2 * sizeof(u16), kS = BQ * sizeof(float);
    const int iterations = key_tiles / 2 * (BQ / 32) * (D / 32);
    const int steps = (next.k.rows_left + iterations - 1) / iterations;  // rows per iteration
    // Query tiles outside: their Q^T tiles (8 KiB per pair) then stay in L1 across the key
    // tiles, and the K block (BK x D) is small enough to stay there too.
    for (int qt = 0; qt < BQ / T; qt += 2)
      for (int kt = 0; kt < key_tiles; kt += 2) {
        amx::zero<0>();
        amx::zero<1>();
        amx::zero<2>();
        amx::zero<3>();
        for (int dc = 0; dc < D / 32; ++dc) {
          amx::load<4>(ka + kt * T * D + dc * 32, kK);
          amx::load<5>(ka + (kt + 1) * T * D + dc * 32, kK);
          amx::load<6>(qv + (dc * T * BQ + qt * T) * 2, kQ);
          amx::load<7>(qv + (dc * T * BQ + (qt + 1) * T) * 2, kQ);
          amx::dot_bf16<0, 4, 6>();
          amx::dot_bf16<1, 4, 7>();
          amx::dot_bf16<2, 5, 6>();
          amx::dot_bf16<3, 5, 7>();
          for (int s = 0; s < steps; ++s) next.step_row();
        }
        amx::store<0>(st + kt * T * BQ + qt * T, kS);
        amx::store<1>(st + kt * T * BQ + (qt + 1) * T, kS);
        amx::store<2>(st + (kt + 1) * T * BQ + qt * T, kS);
        amx::store<3>(st + (kt + 1) * T * BQ + (qt + 1) * T, kS);
      }
  }

  // Rows whose running max moved: O *= alpha (AMX accumulates into memory as is).
  EJK_HD void rescale_output(const float* alpha) {
    for (int i = 0; i < BQ; ++i) {
      if (alpha[i] == 1.0f) continue;
      for (int d = 0; d < D; d += kVecWidth) vstore(o + i * D + d, vload(o + i * D + d) * alpha[i]);
    }
  }

  // The softmax's last pass for AMX: p = exp(s * scale - m) of one 16-query vector (to the
  // ~1e-5 of exp_for_bf16: p is rounded to bf16 right after, and l sums the same p), written
  // as bf16 to pb[i][first_key + j] 32 keys at a time (key pairs packed into 32-bit lanes, the
  // 16 x 16 block of pairs transposed). Keys past kn, up to the chunk's end, get p = 0.
  struct PackProbabilities {
    AmxEngine* e;
    int first_key;
    EJK_HD vf operator()(int v, int kn, vf scale, vf m) const {
      const float* col = e->st + v * T;
      u32* out = reinterpret_cast<u32*>(e->pb) + v * T * (kWindowKeys / 2) + first_key / 2;
      vf sum = vf{};
      for (int j0 = 0; j0 < kn; j0 += 32) {
        amx::v16u r[16];
#pragma GCC unroll 16
        for (int t = 0; t < 16; ++t) {
          const int j = j0 + 2 * t;
          const vf lo = j < kn ? exp_for_bf16(vload(col + j * BQ) * scale - m) : vf{};
          const vf hi = j + 1 < kn ? exp_for_bf16(vload(col + (j + 1) * BQ) * scale - m) : vf{};
          sum += lo + hi;
          r[t] = amx::bf16_pairs(lo, hi);
        }
        amx::transpose16(r);
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i)
          __builtin_memcpy(out + i * (kWindowKeys / 2) + j0 / 2, &r[i], 64);
      }
      return sum;
    }
  };

  // o += P . V over the window's 32-key chunks [c0, c1): each o tile is loaded and stored
  // once for the whole range.
  EJK_HD void accumulate_output(int c0, int c1) {
    if (c0 == c1) return;
    constexpr i64 kO = D * sizeof(float), kP = kWindowKeys * sizeof(u16),
                  kV = D * 2 * sizeof(u16);
    for (int qt = 0; qt < BQ / T; qt += 2)
      for (int dt = 0; dt < D / T; dt += 2) {
        float* o00 = o + qt * T * D + dt * T;
        amx::load<0>(o00, kO);
        amx::load<1>(o00 + T, kO);
        amx::load<2>(o00 + T * D, kO);
        amx::load<3>(o00 + T * D + T, kO);
        for (int c = c0; c < c1; ++c) {
          amx::load<4>(pb + qt * T * kWindowKeys + c * 32, kP);
          amx::load<5>(pb + (qt + 1) * T * kWindowKeys + c * 32, kP);
          amx::load<6>(vv + (c * T * D + dt * T) * 2, kV);
          amx::load<7>(vv + (c * T * D + (dt + 1) * T) * 2, kV);
          amx::dot_bf16<0, 4, 6>();
          amx::dot_bf16<1, 4, 7>();
          amx::dot_bf16<2, 5, 6>();
          amx::dot_bf16<3, 5, 7>();
        }
        amx::store<0>(o00, kO);
        amx::store<1>(o00 + T, kO);
        amx::store<2>(o00 + T * D, kO);
        amx::store<3>(o00 + T * D + T, kO);
      }
  }
};

}  // namespace ejk::cpu
#endif  // EJK_CPU_AMX
