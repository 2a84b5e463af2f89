// ragged paged attention (mixed prefill and decode over a read-only paged KV cache): the
// parameters every kernel takes, and the semantics the kernels and the float64 reference share.
//
// Sequence s < min(num_seqs, S) owns query tokens [qs[s], qs[s + 1]) (n_q of them; decode:
// token s alone, n_q = 1) and cache positions [0, n_kv), n_kv = context_lens[s]; position j of
// kv head g is the row k + page * k_sp + (j % PS) * k_ss + g * k_sh with
// page = block_tables[s, j / PS] (V alike). The cache layout is only strides: an interleaved [P, PS, 2 * Hkv, D] cache and separate
// key and value caches in any page, slot and head order take the same kernel. Query i is at
// position n_kv - n_q + i and, per query head h (kv head h / (Hq / Hkv)):
//   x_j = scale * dot(q, k_j) [+ alibi_h * (j - ctx)] [+ qq_bias[i, j - ctx]]  (ctx = n_kv - n_q;
//   the qq_bias term only where i and j - ctx are in [0, NQ));  softcap: x_j = cap * tanh(x_j / cap)
//   visible: j < n_kv, j <= its position (causal, bottom-right; not with non_causal), with a
//   window W: j > pos - W
//   out = sum_j exp(x_j) v_j / (sum_j exp(x_j) + exp(sink_h)) over the visible j (no sink term
//   without softmax_aux); a query that sees nothing, or a token of no processed sequence, gets 0.
//   lse (when asked) = log(sum_j exp(x_j) + exp(sink_h)), natural log: -inf where that sum is
//   empty (the seed's decode_attention convention), sink_h for a sink alone.
//
// Against the seed's XLA paths (ragged_page_attention_v2, prefill_page_attention,
// unified_attention): scores, softmax and sums are f32 here for every input dtype, where the
// seed's ragged_page_attention_v2 runs them in compute_dtype (bf16 by default); masked positions
// are left out exactly, where the seed adds a large negative value (so a prefill query that sees
// nothing averages every gathered value there and is 0 here); positions are never gathered
// past what a query sees, so unused table entries may hold anything.
#pragma once
#include "ejk/kernels/common/base.h"

namespace ejk {

struct RaggedPageParams {
  const void* q;             // [T, Hq, D]
  const void* k;             // key rows, addressed by the k_* strides
  const void* v;             // value rows, by the v_* strides
  const i32* context_lens;   // [S]
  const i32* block_tables;   // [S, MB]
  const i32* query_start;    // [S + 1]; null: one sequence of all T tokens (a prefill chunk)
  const i32* num_seqs;       // [1]; null: all S
  const float* sinks;        // [Hq] or null
  const float* alibi;        // [Hq] or null: + slope_h * (j - ctx), ctx = n_kv - n_q
  const float* qq_bias;      // [NQ, NQ] or null: + qq_bias[i, j - ctx] where both are below NQ
  void* out;                 // [T, Hq, D]
  float* lse;                // [T, Hq] by lse_st, lse_sh, or null: not written
  i64 tokens, seqs, q_heads, kv_heads, head_dim, num_pages, page_size, max_pages;
  // Element strides (D is contiguous in every tensor).
  i64 q_st, q_sh, o_st, o_sh, lse_st, lse_sh;
  i64 k_sp, k_ss, k_sh, v_sp, v_ss, v_sh;  // per page, slot, kv head
  i64 bt_ss;                               // block_tables between sequences
  float scale;
  float softcap;  // 0: none
  i64 window;     // 0: none
  i64 qq_n;       // NQ
  // decode: token t is sequence t's only query (T == S; query_start and num_seqs unused), so a
  // context of 0 is allowed and sees nothing. non_causal: a query sees every position below
  // n_kv (the window, when given, still bounds them from below). Zero keeps the family's default.
  i32 decode, non_causal;
  // CUDA geometry (ragged_cuda_geometry): tokens and heads per block, the blocks over query
  // tokens; vec: 1 where every cache row can be read in 16-byte chunks.
  i64 cta_tokens, cta_heads, q_blocks;
  i32 vec;
};

// The sequences processed: num_seqs clamped to the tables' rows.
EJK_HD i64 ragged_active_seqs(const RaggedPageParams& p) {
  if (p.num_seqs == nullptr) return p.seqs;  // every sequence of the tables
  return min_of(max_of((i64)p.num_seqs[0], (i64)0), p.seqs);
}

// Query token t's place: its sequence (-1: none), and the cache positions [begin, end) it sees.
struct RaggedSpan {
  i64 seq, begin, end;
  i64 ctx, qi;  // the positions before the sequence's queries, and this query's index
};
// Query i of the n_q of sequence s: what it sees.
EJK_HD RaggedSpan ragged_span_of(const RaggedPageParams& p, i64 s, i64 n_q, i64 i) {
  const i64 n_kv = min_of(max_of((i64)p.context_lens[s], (i64)0), p.max_pages * p.page_size);
  const i64 pos = n_kv - n_q + i;
  const i64 end = p.non_causal != 0 ? n_kv : min_of(pos + 1, n_kv);
  const i64 begin = p.window > 0 ? max_of(pos - p.window + 1, (i64)0) : (i64)0;
  return {s, begin, end > begin ? end : begin, n_kv - n_q, i};
}

EJK_HD RaggedSpan ragged_span(const RaggedPageParams& p, i64 t) {
  i64 lo = 0, hi = ragged_active_seqs(p);
  if (hi == 0) return {-1, 0, 0, 0, 0};
  if (p.decode != 0) return t < hi ? ragged_span_of(p, t, 1, 0) : RaggedSpan{-1, 0, 0, 0, 0};
  if (p.query_start == nullptr) return ragged_span_of(p, 0, p.tokens, t);
  // The last sequence whose range starts at or before t (binary search over the starts).
  if (t < p.query_start[0]) return {-1, 0, 0, 0, 0};
  while (hi - lo > 1) {
    const i64 mid = (lo + hi) / 2;
    if ((i64)p.query_start[mid] <= t) lo = mid; else hi = mid;
  }
  if (t >= (i64)p.query_start[lo + 1]) return {-1, 0, 0, 0, 0};
  return ragged_span_of(p, lo, (i64)p.query_start[lo + 1] - (i64)p.query_start[lo], t - (i64)p.query_start[lo]);
}

// Position j's additive bias for head h: ALiBi and the query-query bias, before the softcap.
EJK_HD float ragged_bias(const RaggedPageParams& p, const RaggedSpan& span, i64 h, i64 j) {
  float x = 0.0f;
  const i64 r = j - span.ctx;
  if (p.alibi != nullptr) x += p.alibi[h] * (float)r;
  if (p.qq_bias != nullptr && r >= 0 && r < p.qq_n && span.qi < p.qq_n) x += p.qq_bias[span.qi * p.qq_n + r];
  return x;
}

// The cache page of position j of sequence s, clamped into the cache: the host checks the
// tables it can read, so a bad device-resident entry gives wrong values, never a stray read.
EJK_HD i64 ragged_page_of(const RaggedPageParams& p, i64 s, i64 j) {
  const i64 b = p.block_tables[s * p.bt_ss + j / p.page_size];
  return min_of(max_of(b, (i64)0), p.num_pages - 1);
}

// The log-sum-exp of a row from its running max m and sum l (of exp(x - m)), the sink joined.
template <class Log, class Exp>
EJK_HD float ragged_row_lse(const RaggedPageParams& p, i64 h, float m, float l, Log log_f, Exp exp_f) {
  const bool sink = p.sinks != nullptr;
  if (l <= 0.0f) return sink ? p.sinks[h] : neg_inf_f32();
  if (!sink) return m + log_f(l);
  const float s = p.sinks[h], mx = s > m ? s : m;
  return mx + log_f(l * exp_f(m - mx) + exp_f(s - mx));
}

// CUDA: a block takes up to kRaggedRows (token, query head) rows of one sequence and one kv
// head, positions in tiles of kRaggedTile, kRaggedThreads threads.
constexpr int kRaggedRows = 16, kRaggedTile = 64, kRaggedThreads = 128;
// Tokens a zero-fill block clears (tokens of no processed sequence).
constexpr int kRaggedZeroTokens = 64;

// The GQA group's heads one block takes (at most kRaggedRows; a wider group takes several
// blocks), and the tokens of one sequence it takes with them (rows = tokens * heads).
EJK_HD i64 ragged_cta_heads(i64 group) { return min_of(group, (i64)kRaggedRows); }
EJK_HD i64 ragged_cta_tokens(i64 group) { return kRaggedRows / ragged_cta_heads(group); }

// Sequence s's first query block: qs[s] / tokens + s. Strictly increasing in s and at least
// ceil(n_q / tokens) apart, so floor(T / tokens) + S blocks cover every sequence of a batch
// whose starts live on the device (the host never reads them).
EJK_HD i64 ragged_first_block(const RaggedPageParams& p, i64 s) {
  return (i64)p.query_start[s] / p.cta_tokens + s;
}

// The CUDA kernel's dynamic shared memory, bytes, for head_dim d of esize-byte elements: two
// stages of K (rows padded by one 16-byte chunk) and V tiles, the rows' f32 queries, two
// halves of the tile's scores, and per row the running max, sum, rescale and visible span.
EJK_HD constexpr i64 ragged_smem_bytes(i64 d, i64 esize) {
  const i64 chunk = 16 / esize, row = (d + chunk - 1) / chunk * chunk;
  return 2 * kRaggedTile * (2 * row + chunk) * esize +
         (kRaggedRows * row + 2 * kRaggedRows * kRaggedTile + 7 * kRaggedRows) * 4;
}

}  // namespace ejk
