#include "ops/blocksparse_attention/bsa_lists.h"

#include <algorithm>

#include "ejk/kernels/common/attention_variant.h"

namespace ejk::ops {
namespace {

// What a block's segment ids allow: the range of its valid ids (-1 and below are padding) and
// whether they are all one valid id.
struct SegmentSummary {
  int32_t lo = INT32_MAX, hi = INT32_MIN;
  bool uniform = true;
  bool any() const { return lo <= hi; }
};

std::vector<SegmentSummary> summarize(const TensorView& ids, int64_t b, int64_t len, int64_t block) {
  std::vector<SegmentSummary> out(size_t((len + block - 1) / block));
  const auto* base = static_cast<const int32_t*>(ids.data) + b * ids.strides[0];
  for (int64_t i = 0; i < len; ++i) {
    SegmentSummary& s = out[size_t(i / block)];
    const int32_t id = base[i * ids.strides[1]];
    if (i % block != 0 && id != base[(i - 1) * ids.strides[1]]) s.uniform = false;
    if (id < 0) {
      s.uniform = false;
      continue;
    }
    s.lo = std::min(s.lo, id), s.hi = std::max(s.hi, id);
  }
  return out;
}

}  // namespace

bool layout_allows(const TensorView* m, int64_t b, int64_t h, int64_t qb, int64_t kb) {
  if (m == nullptr) return true;
  const int64_t at = (m->shape[0] == 1 ? 0 : b * m->strides[0]) + (m->shape[1] == 1 ? 0 : h * m->strides[1]) +
                     qb * m->strides[2] + kb * m->strides[3];
  return static_cast<const uint8_t*>(m->data)[at] != 0;
}

BlocksparseListData build_block_lists(const BlocksparseListInputs& in, const BlocksparseLists& l, bool columns) {
  BlocksparseListData d;
  const int64_t nq = l.num_q_blocks, nk = l.num_k_blocks;
  d.row_offsets.reserve(size_t(in.batch * l.heads * nq + 1));
  d.row_offsets.push_back(0);
  const bool segments = in.q_segment_ids != nullptr;
  std::vector<SegmentSummary> qs, ks;
  for (int64_t b = 0; b < in.batch; ++b) {
    if (segments) {
      qs = summarize(*in.q_segment_ids, b, in.seqlen_q, l.block_q);
      ks = summarize(*in.kv_segment_ids, b, in.seqlen_k, l.block_k);
    }
    for (int64_t h = 0; h < l.heads; ++h)
      for (int64_t qb = 0; qb < nq; ++qb) {
        const int64_t q_first = qb * l.block_q, q_last = std::min<int64_t>(in.seqlen_q, q_first + l.block_q) - 1;
        for (int64_t kb = 0; kb < nk; ++kb) {
          if (!layout_allows(in.block_mask, b, h, qb, kb)) continue;
          const int64_t k_first = kb * l.block_k, k_last = std::min<int64_t>(in.seqlen_k, k_first + l.block_k) - 1;
          const TileClass c = classify_tile(in.mask, q_first, q_last, k_first, k_last, in.seqlen_k);
          if (c == TileClass::masked) continue;
          bool full = c == TileClass::visible;
          if (segments) {
            const SegmentSummary &a = qs[size_t(qb)], &e = ks[size_t(kb)];
            // Disjoint ranges of valid ids: no pair shares a segment.
            if (!a.any() || !e.any() || a.hi < e.lo || e.hi < a.lo) continue;
            full = full && a.uniform && e.uniform && a.lo == e.lo;
          }
          d.row_entries.push_back(bsa_entry(kb, full));
        }
        d.row_offsets.push_back(int32_t(d.row_entries.size()));
      }
  }
  if (!columns) return d;
  // The transpose, per (batch, layout head): counts per key block, then entries in query order.
  const int64_t planes = in.batch * l.heads;
  d.col_offsets.assign(size_t(planes * nk + 1), 0);
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t qb = 0; qb < nq; ++qb)
      for (int32_t e = d.row_offsets[size_t(p * nq + qb)]; e < d.row_offsets[size_t(p * nq + qb + 1)]; ++e)
        ++d.col_offsets[size_t(p * nk + bsa_entry_block(d.row_entries[size_t(e)]) + 1)];
  for (size_t i = 1; i < d.col_offsets.size(); ++i) d.col_offsets[i] += d.col_offsets[i - 1];
  d.col_entries.resize(d.row_entries.size());
  std::vector<int32_t> fill(d.col_offsets.begin(), d.col_offsets.end() - 1);
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t qb = 0; qb < nq; ++qb)
      for (int32_t e = d.row_offsets[size_t(p * nq + qb)]; e < d.row_offsets[size_t(p * nq + qb + 1)]; ++e) {
        const int32_t entry = d.row_entries[size_t(e)];
        d.col_entries[size_t(fill[size_t(p * nk + bsa_entry_block(entry))]++)] = bsa_entry(qb, bsa_entry_full(entry));
      }
  return d;
}

}  // namespace ejk::ops
