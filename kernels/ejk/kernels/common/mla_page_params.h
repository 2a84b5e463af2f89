// Multi-head latent attention over a paged latent cache (multi_latent_ragged_page_attention):
// the parameters every kernel takes, and the semantics the kernels and the float64 reference share.
//
// Cache: [P, PS / PK, PK, KD], PK = 32 / bits of the dtype (1 for f32, 2 for 16-bit types), so
// slot j of a page is (j / PK, j % PK); a row is [c (R), 0 pad to align128(R), k_pe (E), 0 pad]
// with KD = align128(R) + align128(E). Every query head reads the same latent rows: c is both
// the key's no-position part and the value, k_pe the key's rotary part.
//
// Sequence s < min(distribution[2], S) owns query tokens [qs[s], qs[s + 1]) (n_q of them) and
// positions [0, n_kv), n_kv = kv_lens[s] (this call's tokens included): position j < ctx =
// n_kv - n_q is cache row (block_tables[s * MB + j / PS], j % PS); position ctx + i is this
// call's token qs[s] + i, read from keys_values and keys_pe (the same values the wrappers write
// into the cache, so the attention does not wait for the write). Query i sits at ctx + i and
// sees j <= its position (causal, bottom-right), with a window W only j > pos - W (mask.h's
// MaskSpec). Per query head h:
//   x_j = scale * (dot(q_nope, c_j) + dot(q_pe, pe_j));  softcap: x_j = cap * tanh(x_j / cap)
//   out = v_scale * sum_j exp(x_j) c_j / sum_j exp(x_j)   (latent space, [R])
// A query that sees nothing, and a token of no processed sequence, gets 0.
#pragma once
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/mask.h"

namespace ejk {

struct MlaPageParams {
  const void* q_nope;        // [T, Hq, R]
  const void* q_pe;          // [T, Hq, E]
  const void* new_c;         // keys_values [T, R]
  const void* new_pe;        // keys_pe [T, E]
  const void* cache;         // [P, PS / PK, PK, KD]
  const i32* kv_lens;        // [S]
  const i32* block_tables;   // [S * MB], row-major
  const i32* query_start;    // [S + 1]
  const i32* distribution;   // [3]; [2] is the number of sequences processed
  void* out;                 // [T, Hq, R]
  i64 tokens, seqs, q_heads, latent, rope, num_pages, page_size, pack, max_pages;
  i64 pe_offset;             // align128(R): where k_pe starts in a cache row
  // Element strides (the last dim is contiguous in every tensor).
  i64 qn_st, qn_sh, qp_st, qp_sh, nc_st, np_st, o_st, o_sh;
  i64 c_sp, c_sq, c_sk;      // cache: per page, per slot / PK, per slot % PK
  i64 bt_s;                  // block_tables' element stride
  float scale;
  float softcap;  // 0: none
  float v_scale;
  i64 window;     // 0: none
  i32 vec;        // CUDA: 1 where every latent row and key row can be read in 16-byte chunks
};

// The sequences processed: distribution[2] clamped to [0, S].
EJK_HD i64 mla_active_seqs(const MlaPageParams& p) {
  return min_of(max_of((i64)p.distribution[2], (i64)0), p.seqs);
}

// Query token t's place: its sequence (-1: none), the positions [begin, end) it sees, the
// sequence's cached positions ctx and its first token.
struct MlaSpan {
  i64 seq, begin, end, ctx, first;
};

EJK_HD MlaSpan mla_span_of(const MlaPageParams& p, i64 s, i64 t) {
  const i64 first = p.query_start[s], n_q = (i64)p.query_start[s + 1] - first;
  const i64 n_kv = min_of(max_of((i64)p.kv_lens[s], n_q), p.max_pages * p.page_size);
  const i64 ctx = n_kv - n_q, pos = ctx + (t - first);
  MaskSpec m;
  m.causal = true;
  if (p.window > 0) m.window_left = p.window - 1;
  const i64 begin = max_of(first_visible_key(pos, m), (i64)0);
  const i64 end = min_of(last_visible_key(pos, m) + 1, n_kv);
  return {s, begin, end > begin ? end : begin, ctx, first};
}

EJK_HD MlaSpan mla_span(const MlaPageParams& p, i64 t) {
  const MlaSpan none{-1, 0, 0, 0, 0};
  i64 lo = 0, hi = mla_active_seqs(p);
  if (hi == 0 || t < (i64)p.query_start[0]) return none;
  // The last sequence whose range starts at or before t (binary search over the starts).
  while (hi - lo > 1) {
    const i64 mid = (lo + hi) / 2;
    if ((i64)p.query_start[mid] <= t) lo = mid; else hi = mid;
  }
  if (t >= (i64)p.query_start[lo + 1]) return none;
  return mla_span_of(p, lo, t);
}

// Position j's latent row c (R elements) and rope key (E elements), as element offsets into
// the cache (cached positions) or into keys_values / keys_pe (this call's tokens). The page is
// clamped into the cache: the host checks tables it can read, a bad device-resident entry
// gives wrong values, never a stray read.
struct MlaRow {
  bool fresh;   // this call's token: new_c + c, new_pe + pe; else cache + c, cache + pe
  i64 c, pe;
};

EJK_HD MlaRow mla_row(const MlaPageParams& p, const MlaSpan& span, i64 j) {
  if (j >= span.ctx) {
    const i64 t = span.first + (j - span.ctx);
    return {true, t * p.nc_st, t * p.np_st};
  }
  const i64 b = p.block_tables[(span.seq * p.max_pages + j / p.page_size) * p.bt_s];
  const i64 page = min_of(max_of(b, (i64)0), p.num_pages - 1), slot = j % p.page_size;
  const i64 c = page * p.c_sp + (slot / p.pack) * p.c_sq + (slot % p.pack) * p.c_sk;
  return {false, c, c + p.pe_offset};
}

// CPU: a task takes up to kMlaCpuHeads query heads of one token (the runtime counts the tasks).
constexpr int kMlaCpuHeads = 16;
EJK_HD i64 mla_cpu_head_blocks(i64 q_heads) { return (q_heads + kMlaCpuHeads - 1) / kMlaCpuHeads; }

// CUDA (cuda/mla_page.cuh): a block of kMlaThreads threads takes up to kMlaRows query heads of
// one token over tiles of kMlaTile positions, kMlaStages deep.
constexpr int kMlaThreads = 128, kMlaRows = 16, kMlaTile = 32, kMlaStages = 2;

// Its dynamic shared memory, bytes, for 16-bit elements: the query rows and the stages' latent
// rows ([c, k_pe], pitch R + E + 8 elements), and every warp's partial scores of a tile.
EJK_HD constexpr i64 mla_cuda_smem_bytes(i64 r, i64 e) {
  return (kMlaRows + kMlaStages * kMlaTile) * (r + e + 8) * 2 + (kMlaThreads / 32) * kMlaRows * kMlaTile * 4;
}

// 128-element alignment of the cache row's two parts (the seed's layout).
EJK_HD constexpr i64 mla_align128(i64 n) { return (n + 127) / 128 * 128; }

}  // namespace ejk
