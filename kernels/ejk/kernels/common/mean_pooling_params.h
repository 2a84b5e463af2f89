// Mean pooling over the token axis and its backward: the parameters every kernel takes, and the
// semantics the kernels and the float64 reference share (a sequence's tokens, the scale of an
// empty sequence, how the token range is cut into chunks and which chunk writes what).
//
// Work is cut by tokens, not by sequences: the packed token range [0, total) falls into chunks
// of `chunk` tokens, so one long sequence among short ones spreads over many workers. A worker
// visits the sequences its range touches (mean_pool_walk). The forward writes a sequence whose
// tokens all lie in one chunk straight to out; a sequence cut by chunk edges leaves one partial
// sum per chunk, which a combine step adds in chunk order (deterministic results).
#pragma once
#include "ejk/kernels/common/base.h"

namespace ejk {

struct MeanPoolParams {
  // `tokens`: x (forward, read) or dx (backward, written), [B, T, D] dense or [total, D] packed.
  // `rows`: out (forward, written) or g (backward, read), [B, D] or [N, D]. D is contiguous.
  void* tokens;
  void* rows;
  const i32* cu_seqlens;  // varlen: sequences + 1 entries, read by the kernels; null: dense
  i64 sequences;          // B (dense) or N (varlen)
  i64 seqlen;             // dense: T, tokens per sequence; varlen: unused
  i64 total;              // tokens in all: B * T (dense) or the packed T (varlen)
  i64 dim;                // D
  i64 tok_stride_b;       // elements between sequences of `tokens` (dense; 0 when packed)
  i64 tok_stride_t;       // elements between tokens of `tokens`
  i64 row_stride;         // elements between rows of `rows`

  // Chunks: [c * chunk, min((c + 1) * chunk, total)) for c < chunks (one chunk when total is 0).
  // Column tiles: [j * col_tile, min((j + 1) * col_tile, dim)) for j < col_tiles.
  i64 chunk, chunks;
  i64 col_tile, col_tiles;

  // Forward, when a sequence may cross a chunk edge: f32 [chunks][2][dim]. Slot 0 of chunk c
  // holds the piece of the sequence that began before c, slot 1 the piece of the one that
  // begins in c and goes on past it (mean_pool_partial).
  float* partials;
  u32* arrivals;  // CPU forward: [chunks][col_tiles] counters, zero before the tasks run
  i32 phase;      // CUDA forward: 0 sums the chunks, 1 combines the partial sums
  i32 vec;        // CUDA: elements per thread's vector access (16 bytes of them, or 1)
  i32 lanes;      // CUDA: threads across a tile (lanes * vec == col_tile)
};

// CUDA: threads per block, and the blocks per SM each kernel is compiled for (its
// __launch_bounds__; the forward's phase 0 needs more registers than the backward).
constexpr int kMeanPoolThreads = 256;
constexpr int kMeanPoolFwdBlocksPerSm = 3, kMeanPoolBwdBlocksPerSm = 4;

// Widest column tile of a CPU task: its f32 sums and one converted row live on the stack.
constexpr i64 kMeanPoolMaxColTile = 1024;

// Tokens [begin, end) of sequence s in the packed token range (base.h's token_span).
using MeanPoolSpan = TokenSpan;
EJK_HD MeanPoolSpan mean_pool_span(const MeanPoolParams& p, i64 s) {
  return token_span(p.cu_seqlens, p.seqlen, p.total, s);
}

// Offset in elements of token i (a packed index) of sequence s in `tokens`.
EJK_HD i64 mean_pool_token(const MeanPoolParams& p, i64 s, i64 i) {
  const i64 first = p.cu_seqlens == nullptr ? s * p.seqlen : 0;  // dense: i - first is t
  return s * p.tok_stride_b + (i - first) * p.tok_stride_t;
}

// 1 / len, and 0 for a sequence without tokens: its mean is 0 (not 0 / 0) and its tokens,
// having none, receive nothing.
template <class F> EJK_HD F mean_pool_scale(i64 len) { return len > 0 ? F(1) / F(len) : F(0); }

// The first sequence a worker of tokens [lo, hi) visits: the first one ending past lo, or an
// empty one at lo (a non-empty sequence that ends at lo belongs to the worker before).
EJK_HD i64 mean_pool_first_sequence(const MeanPoolParams& p, i64 lo) {
  i64 a = 0, b = p.sequences;  // first s whose end >= lo
  while (a < b) {
    const i64 m = a + (b - a) / 2;
    if (mean_pool_span(p, m).end < lo) a = m + 1;
    else b = m;
  }
  if (a < p.sequences) {
    const MeanPoolSpan sp = mean_pool_span(p, a);
    if (sp.end == lo && sp.begin < lo) ++a;
  }
  return a;
}

// Calls f(s, span, a, e) for every sequence s a worker of tokens [lo, hi) owns a piece [a, e) of:
// those whose tokens meet [lo, hi), and those without tokens that sit at a position in [lo, hi)
// (at `total` too for the last worker, `last`), with a == e. Workers whose ranges tile
// [0, total) thus visit every sequence, and each token once.
template <class F>
EJK_HD void mean_pool_walk(const MeanPoolParams& p, i64 lo, i64 hi, bool last, F&& f) {
  for (i64 s = mean_pool_first_sequence(p, lo); s < p.sequences; ++s) {
    const MeanPoolSpan sp = mean_pool_span(p, s);
    if (sp.begin > hi || (sp.begin == hi && !(last && sp.end == hi))) return;
    f(s, sp, max_of(sp.begin, lo), min_of(sp.end, hi));
  }
}

// Token range of chunk c.
EJK_HD MeanPoolSpan mean_pool_chunk(const MeanPoolParams& p, i64 c) {
  const i64 lo = min_of(c * p.chunk, p.total);
  return {lo, min_of(lo + p.chunk, p.total)};
}

// The chunks a non-empty sequence's first and last tokens fall in.
EJK_HD i64 mean_pool_first_chunk(const MeanPoolParams& p, const MeanPoolSpan& sp) { return sp.begin / p.chunk; }
EJK_HD i64 mean_pool_last_chunk(const MeanPoolParams& p, const MeanPoolSpan& sp) { return (sp.end - 1) / p.chunk; }

EJK_HD float* mean_pool_partial(const MeanPoolParams& p, i64 c, int slot) {
  return p.partials + (c * 2 + slot) * p.dim;
}

// The partial sums of a sequence cut by chunk edges, in the order every combine adds them: its
// first chunk's slot 1, then slot 0 of each later chunk through its last. k counts from 0.
EJK_HD const float* mean_pool_piece(const MeanPoolParams& p, i64 first_chunk, i64 k) {
  return k == 0 ? mean_pool_partial(p, first_chunk, 1) : mean_pool_partial(p, first_chunk + k, 0);
}

}  // namespace ejk
