// CPU recurrent attention, forward and backward (semantics: common/recurrent_params.h).
//
// Forward: one task is (sequence, head, tile of kRecurrentCpuColumns state columns); the tile's
// K x 16 f32 state stays on the worker's stack and walks the sequence, vectorized over columns.
// Backward: a task is a lane of (sequence, head) units (w, w + lanes, ...) with a workspace of
// its own; per unit a forward pass keeps the state before every C-th step, then chunk by chunk
// from the last the chunk's states are recomputed and D = dL/dS is carried back through them.
// Rows are padded to a multiple of 16 columns with zeros, which every sum then ignores.
//
// Header only and freestanding (no standard headers): it is also JIT-compiled in-process.
#pragma once
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/recurrent_params.h"
#include "ejk/kernels/cpu/math.h"
#include "ejk/kernels/cpu/types.h"
#include "ejk/kernels/cpu/vec.h"

namespace ejk::cpu {

// Cfg: kElem, kK, kV, kG, kGamma, kGk, kGv, kGh, kReverse, kBackward.
template <class Cfg> inline constexpr bool kRecurrentRowGate =
    Cfg::kG || Cfg::kGamma || Cfg::kGk || recurrent_head_gate<Cfg>();

// dst[0, n) = src's elements at (s, i, h), columns [c0, c0 + n), times mul; dst[n, npad) = 0.
template <ElemKind E>
EJK_HD void recurrent_load(float* dst, const RecurrentParams& p, const RecurrentTokens& t, i64 s, i64 i, i64 h,
                           i64 c0, i64 n, i64 npad, float mul) {
  const Elem<E>* src = static_cast<const Elem<E>*>(t.data) + recurrent_at(p, t, s, i, h) + c0;
  for (i64 c = 0; c < n; ++c) dst[c] = to_f32<E>(src[c]) * mul;
  for (i64 c = n; c < npad; ++c) dst[c] = 0;
}

template <ElemKind E>
EJK_HD void recurrent_store(const RecurrentParams& p, const RecurrentTokens& t, i64 s, i64 i, i64 h, i64 c0,
                            const float* src, i64 n) {
  if (t.data == nullptr) return;
  Elem<E>* dst = static_cast<Elem<E>*>(t.data) + recurrent_at(p, t, s, i, h) + c0;
  for (i64 c = 0; c < n; ++c) dst[c] = from_f32<E>(src[c]);
}

// dst[0, n) = exp(dst[0, n)), vectorized.
EJK_HD void recurrent_exp(float* dst, i64 n) {
  i64 c = 0;
  for (; c + kVecWidth <= n; c += kVecWidth) vstore(dst + c, exp_approx<vf>(vload(dst + c)));
  for (; c < n; ++c) dst[c] = exp_approx<float>(dst[c]);
}

// One token's operands: q (times scale), k, the row decay a, and columns [c0, c0 + n) of v,
// the column decay b and (backward) do, zero-padded to `npad` (b: 1).
template <class Cfg, int kCols> struct RecurrentToken {
  float q[Cfg::kK], k[Cfg::kK], a[Cfg::kK];
  float v[kCols], b[kCols], d_o[kCols];

  EJK_HD void load(const RecurrentParams& p, i64 s, i64 i, i64 h, i64 c0, i64 n, bool with_do) {
    constexpr ElemKind E = Cfg::kElem;
    constexpr int K = Cfg::kK;
    recurrent_load<E>(q, p, p.q, s, i, h, 0, K, K, p.scale);
    recurrent_load<E>(k, p, p.k, s, i, h, 0, K, K, 1.0f);
    recurrent_load<E>(v, p, p.v, s, i, h, c0, n, kCols, 1.0f);
    if (with_do) recurrent_load<E>(d_o, p, p.d_o, s, i, h, c0, n, kCols, 1.0f);
    if constexpr (kRecurrentRowGate<Cfg>) {
      float scalar = Cfg::kGamma ? p.g_gamma[h] : 0.0f;
      if constexpr (recurrent_head_gate<Cfg>())
        scalar += to_f32<E>(static_cast<const Elem<E>*>(p.gh.data)[recurrent_at(p, p.gh, s, i, h)]);
      for (int c = 0; c < K; ++c) a[c] = scalar;
      float row[K];
      if constexpr (Cfg::kG) {
        recurrent_load<E>(row, p, p.g, s, i, h, 0, K, K, 1.0f);
        for (int c = 0; c < K; ++c) a[c] += row[c];
      }
      if constexpr (Cfg::kGk) {
        recurrent_load<E>(row, p, p.gk, s, i, h, 0, K, K, 1.0f);
        for (int c = 0; c < K; ++c) a[c] += row[c];
      }
      recurrent_exp(a, K);
    }
    if constexpr (Cfg::kGv) {
      recurrent_load<E>(b, p, p.gv, s, i, h, c0, n, kCols, 1.0f);
      recurrent_exp(b, kCols);
    }
  }
  EJK_HD float row_decay(int r) const {
    if constexpr (kRecurrentRowGate<Cfg>) return a[r];
    else return 1.0f;
  }
  EJK_HD vf col_decay(int c) const {
    if constexpr (Cfg::kGv) return vload(b + c);
    else return splat<vf>(1.0f);
  }
};

EJK_HD float recurrent_hsum(vf x) {
  float s = 0;
  for (int l = 0; l < kVecWidth; ++l) s += x[l];
  return s;
}

// S (K rows of kCols floats) = one step from prev (may be S itself).
template <class Cfg, int kCols>
EJK_HD void recurrent_step(float* S, const float* prev, const RecurrentToken<Cfg, kCols>& x) {
  for (int r = 0; r < Cfg::kK; ++r)
    for (int c = 0; c < kCols; c += kVecWidth)
      vstore(S + r * kCols + c, recurrent_update(vload(prev + r * kCols + c), x.row_decay(r), x.col_decay(c),
                                                 x.k[r], vload(x.v + c)));
}

// State rows (s, h) of a contiguous [.., H, K, V] f32 state, columns [c0, c0 + n), into S
// (kCols per row, zero-padded); zeros where the state is absent.
template <class Cfg, int kCols>
EJK_HD void recurrent_load_state(float* S, const RecurrentParams& p, const float* state, i64 s, i64 h, i64 c0, i64 n) {
  for (int r = 0; r < Cfg::kK; ++r)
    for (int c = 0; c < kCols; ++c)
      S[r * kCols + c] = state != nullptr && c < n ? state[recurrent_state_at(p, s, h) + r * p.dv_ + c0 + c] : 0.0f;
}

template <class Cfg, int kCols>
EJK_HD void recurrent_store_state(float* state, const RecurrentParams& p, const float* S, i64 s, i64 h, i64 c0, i64 n) {
  if (state == nullptr) return;
  for (int r = 0; r < Cfg::kK; ++r)
    for (int c = 0; c < n; ++c) state[recurrent_state_at(p, s, h) + r * p.dv_ + c0 + c] = S[r * kCols + c];
}

template <class Cfg>
EJK_HD void recurrent_fwd_task(const RecurrentParams& p, i64 s, i64 h, i64 tile) {
  constexpr int K = Cfg::kK, W = (int)kRecurrentCpuColumns;
  const i64 c0 = tile * W, n = min_of((i64)W, p.dv_ - c0);
  float S[K * W];
  RecurrentToken<Cfg, W> x;
  recurrent_load_state<Cfg, W>(S, p, p.h0, s, h, c0, n);
  const RecurrentSpan sp = recurrent_span(p, s);
  for (i64 step = 0; step < sp.end - sp.begin; ++step) {
    const i64 i = recurrent_token(sp, step, Cfg::kReverse);
    x.load(p, s, i, h, c0, n, false);
    recurrent_step<Cfg, W>(S, S, x);
    float o[W];
    for (int c = 0; c < W; c += kVecWidth) {
      vf acc = vf{};
      for (int r = 0; r < K; ++r) acc += x.q[r] * vload(S + r * W + c);
      vstore(o + c, acc);
    }
    recurrent_store<Cfg::kElem>(p, p.o, s, i, h, c0, o, n);
  }
  recurrent_store_state<Cfg, W>(p.ht, p, S, s, h, c0, n);
}

// The gradients of one token from D (the gradient of the state after the step, do's term
// included), the state after the step and the one before; then D is carried back.
template <class Cfg, int kCols>
EJK_HD void recurrent_bwd_token(const RecurrentParams& p, i64 s, i64 i, i64 h, float* D, const float* S,
                                const float* prev, const RecurrentToken<Cfg, kCols>& x) {
  constexpr int K = Cfg::kK;
  float dq[K], dk[K], dlr[K], dv[kCols], dlc[kCols];
  for (int c = 0; c < kCols; ++c) dv[c] = 0, dlc[c] = 0;
  for (int r = 0; r < K; ++r) {
    float* Dr = D + r * kCols;
    vf sq = vf{}, sk = vf{}, sl = vf{};
    for (int c = 0; c < kCols; c += kVecWidth) {
      const vf d = vload(Dr + c) + x.q[r] * vload(x.d_o + c);  // x.q holds scale * q
      const vf prior = vload(prev + r * kCols + c) * x.row_decay(r) * x.col_decay(c);
      sq += vload(x.d_o + c) * vload(S + r * kCols + c);
      sk += d * vload(x.v + c);
      sl += d * prior;
      vstore(dv + c, vload(dv + c) + d * x.k[r]);
      vstore(dlc + c, vload(dlc + c) + d * prior);
      vstore(Dr + c, recurrent_carry(d, x.row_decay(r), x.col_decay(c)));
    }
    dq[r] = p.scale * recurrent_hsum(sq), dk[r] = recurrent_hsum(sk), dlr[r] = recurrent_hsum(sl);
  }
  constexpr ElemKind E = Cfg::kElem;
  recurrent_store<E>(p, p.dq, s, i, h, 0, dq, K);
  recurrent_store<E>(p, p.dk, s, i, h, 0, dk, K);
  recurrent_store<E>(p, p.dv, s, i, h, 0, dv, p.dv_);
  recurrent_store<E>(p, p.dg, s, i, h, 0, dlr, K);
  recurrent_store<E>(p, p.dgk, s, i, h, 0, dlr, K);
  recurrent_store<E>(p, p.dgv, s, i, h, 0, dlc, p.dv_);
}

template <class Cfg>
EJK_HD void recurrent_bwd_unit(const RecurrentParams& p, i64 s, i64 h, float* lane) {
  constexpr int K = Cfg::kK, W = (int)recurrent_cpu_row(Cfg::kV);
  constexpr i64 kState = (i64)K * W;
  float *S = lane, *D = lane + kState, *ckpt = lane + 2 * kState, *states = ckpt + p.chunks_cap * kState;
  RecurrentToken<Cfg, W> x;
  const RecurrentSpan sp = recurrent_span(p, s);
  const i64 len = sp.end - sp.begin, chunks = recurrent_chunks(p, len);
  recurrent_load_state<Cfg, W>(S, p, p.h0, s, h, 0, p.dv_);
  for (i64 step = 0; step < len; ++step) {
    if (step % p.chunk == 0) __builtin_memcpy(ckpt + step / p.chunk * kState, S, sizeof(float) * kState);
    x.load(p, s, recurrent_token(sp, step, Cfg::kReverse), h, 0, p.dv_, false);
    recurrent_step<Cfg, W>(S, S, x);
  }
  recurrent_load_state<Cfg, W>(D, p, p.dht, s, h, 0, p.dv_);
  for (i64 c = chunks - 1; c >= 0; --c) {
    const i64 n0 = c * p.chunk, n1 = min_of(len, n0 + p.chunk);
    const float* start = ckpt + c * kState;
    for (i64 step = n0; step < n1; ++step) {
      x.load(p, s, recurrent_token(sp, step, Cfg::kReverse), h, 0, p.dv_, false);
      recurrent_step<Cfg, W>(states + (step - n0) * kState, step == n0 ? start : states + (step - n0 - 1) * kState, x);
    }
    for (i64 step = n1 - 1; step >= n0; --step) {
      const i64 i = recurrent_token(sp, step, Cfg::kReverse);
      x.load(p, s, i, h, 0, p.dv_, true);
      const float* prev = step == n0 ? start : states + (step - n0 - 1) * kState;
      recurrent_bwd_token<Cfg, W>(p, s, i, h, D, states + (step - n0) * kState, prev, x);
    }
  }
  recurrent_store_state<Cfg, W>(p.dh0, p, D, s, h, 0, p.dv_);
}

// A variant's template passes a type of its own (internal linkage), so objects built for
// different targets never share one weak copy of these loops.
template <class Cfg>
void recurrent_tasks(const RecurrentParams& p, long long task_begin, long long task_end) {
  for (long long t = task_begin; t < task_end; ++t) {
    if constexpr (Cfg::kBackward) {
      float* lane = p.work + t * recurrent_cpu_lane_floats(Cfg::kK, Cfg::kV, p.chunks_cap, p.chunk);
      for (i64 u = t; u < p.sequences * p.heads; u += p.lanes) recurrent_bwd_unit<Cfg>(p, u / p.heads, u % p.heads, lane);
    } else {
      const i64 per_seq = p.heads * p.v_tiles;
      recurrent_fwd_task<Cfg>(p, t / per_seq, t / p.v_tiles % p.heads, t % p.v_tiles);
    }
  }
}

}  // namespace ejk::cpu
