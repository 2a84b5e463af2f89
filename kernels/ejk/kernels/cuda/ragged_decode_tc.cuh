// The ragged paged family's one-token blocks (decode rows, and the last block of a prefill
// sequence when it holds one token) on the tensor-core decode core (page_decode_tc.cuh), with
// the family's semantics (common/ragged_page_params.h): the token's causal span and window,
// ALiBi and qq_bias before the softcap, the sink in the denominator, the log-sum-exp.
// ragged_page.cuh takes it for 16-bit variants with D a multiple of 16 (at most 256) where the
// caches allow 16-byte chunk loads (page_uses_tc; the host sizes shared memory by the same test).
#pragma once
#include "ejk/kernels/common/ragged_page_params.h"
#include "ejk/kernels/cuda/page_decode_tc.cuh"

namespace ejk::cuda {

// Token `tok`, query qi of the n_q of sequence seq, heads [h0, h0 + nh) of kv head g.
template <class Cfg>
__device__ __forceinline__ void ragged_decode_tc(const RaggedPageParams& p, i64 seq, i64 n_q, i64 qi, i64 tok,
                                                 i64 g, i64 h0, int nh) {
  const RaggedSpan span = ragged_span_of(p, seq, n_q, qi);
  DecodeRows w;
  w.begin = span.begin, w.end = span.end;
  w.table = p.block_tables + seq * p.bt_ss, w.last_page = i32(p.num_pages - 1), w.page_size = u32(p.page_size);
  w.k = static_cast<const u16*>(p.k) + g * p.k_sh, w.v = static_cast<const u16*>(p.v) + g * p.v_sh;
  w.k_page = p.k_sp, w.k_slot = p.k_ss, w.v_page = p.v_sp, w.v_slot = p.v_ss;
  w.q = static_cast<const u16*>(p.q) + tok * p.q_st + h0 * p.q_sh, w.q_head = p.q_sh;
  w.nh = nh, w.scale = p.scale, w.softcap = p.softcap;
  const bool biased = p.alibi != nullptr || p.qq_bias != nullptr;
  // Padding rows (r >= nh) have no head: no bias read for them.
  auto bias = [&](int r, i64 j) { return biased && r < nh ? ragged_bias(p, span, h0 + r, j) : 0.0f; };
  decode_tc<Cfg>(w, bias, [&](int r, int c, const float (&y)[8], float mm, float ll) {
    constexpr float kLn2 = 0.6931471805599453f;
    const i64 h = h0 + r;
    // y is normalized by ll; the sink joins the denominator only: out = y ll / (ll + e^(sink - m)),
    // both terms rescaled to the larger of the row max and the sink.
    float keep = 1.0f;
    if (p.sinks != nullptr && ll > 0.0f) {
      const float m = mm * kLn2, sink = p.sinks[h], mx = fmaxf(sink, m);
      const float kept = ll * expf(m - mx);
      keep = kept / (kept + expf(sink - mx));
    }
    u16* out = static_cast<u16*>(p.out) + tok * p.o_st + h * p.o_sh + c * 8;
#pragma unroll
    for (int e = 0; e < 8; e += 2) {
      const u32 v = pack2<Cfg::E>(y[e] * keep, y[e + 1] * keep);
      out[e] = u16(v & 0xffffu), out[e + 1] = u16(v >> 16);
    }
    if (p.lse != nullptr && c == 0)
      p.lse[tok * p.lse_st + h * p.lse_sh] =
          ragged_row_lse(p, h, mm * kLn2, ll, [](float x) { return logf(x); }, [](float x) { return expf(x); });
  });
}

}  // namespace ejk::cuda
