// CPU gated delta rule, forward and backward (semantics: common/delta_params.h).
//
// Forward: one task is (sequence, head, tile of kDeltaCpuColumns state columns): the columns of
// S evolve independently, so the tile's K x 16 f32 state stays on the worker's stack and walks
// the sequence, vectorized over columns.
// Backward: a task is a lane of (sequence, head) units (w, w + lanes, ...) with a workspace of
// its own; per unit a forward pass keeps the state before every C-th step, then chunk by chunk
// from the last the chunk's states are recomputed and D = dL/dS is carried back through them.
// Rows are padded to a multiple of 16 columns with zeros (v, do and S are 0 there, so are d
// and every sum over columns).
//
// Header only and freestanding (no standard headers): it is also JIT-compiled in-process.
#pragma once
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/delta_params.h"
#include "ejk/kernels/cpu/math.h"
#include "ejk/kernels/cpu/types.h"
#include "ejk/kernels/cpu/vec.h"

namespace ejk::cpu {

// Cfg: kElem, kK, kV, kBackward.

template <ElemKind E>
EJK_HD float delta_scalar(const DeltaTokens& t, i64 s, i64 i, i64 h) {
  return to_f32<E>(static_cast<const Elem<E>*>(t.data)[delta_at(t, s, i, h)]);
}

// dst[0, n) = columns [c0, c0 + n) of t at (s, i, h); dst[n, npad) = 0.
template <ElemKind E>
EJK_HD void delta_load(float* dst, const DeltaTokens& t, i64 s, i64 i, i64 h, i64 c0, i64 n, i64 npad) {
  const Elem<E>* src = static_cast<const Elem<E>*>(t.data) + delta_at(t, s, i, h) + c0;
  for (i64 c = 0; c < n; ++c) dst[c] = to_f32<E>(src[c]);
  for (i64 c = n; c < npad; ++c) dst[c] = 0;
}

// Columns [c0, c0 + n) of t at (s, i, h) = src[0, n).
template <ElemKind E>
EJK_HD void delta_store(const DeltaTokens& t, i64 s, i64 i, i64 h, const float* src, i64 n, i64 c0 = 0) {
  if (t.data == nullptr) return;
  Elem<E>* dst = static_cast<Elem<E>*>(t.data) + delta_at(t, s, i, h) + c0;
  for (i64 c = 0; c < n; ++c) dst[c] = from_f32<E>(src[c]);
}

// x[0, n) divided by sqrt(sum x^2 + eps); returns that factor.
EJK_HD float delta_normalize(float* x, i64 n) {
  float ss = 0;
  for (i64 c = 0; c < n; ++c) ss += x[c] * x[c];
  const float inv = 1.0f / __builtin_sqrtf(ss + kDeltaNormEps);
  for (i64 c = 0; c < n; ++c) x[c] *= inv;
  return inv;
}

// The gradient through x / sqrt(sum x^2 + eps): dx = inv (dy - y (y . dy)), y the normalized x.
EJK_HD void delta_normalize_bwd(float* dy, const float* y, float inv, i64 n) {
  float dot = 0;
  for (i64 c = 0; c < n; ++c) dot += y[c] * dy[c];
  for (i64 c = 0; c < n; ++c) dy[c] = inv * (dy[c] - y[c] * dot);
}

// One token's operands: q (normalized, times scale), k (normalized), beta, the decay, and
// columns [c0, c0 + n) of v and (backward) do, zero-padded to kCols.
template <class Cfg, int kCols> struct DeltaToken {
  float q[Cfg::kK], k[Cfg::kK], v[kCols], d_o[kCols];
  float qn[Cfg::kK];  // q normalized, before the scale (backward)
  float q_inv, k_inv, beta, a;
  bool live;   // the decay was not clamped
  bool reset;  // a new segment starts here

  EJK_HD void load(const DeltaParams& p, i64 s, i64 i, i64 h, i64 c0, i64 n, bool with_do) {
    constexpr ElemKind E = Cfg::kElem;
    constexpr int K = Cfg::kK;
    delta_load<E>(q, p.q, s, i, h, 0, K, K);
    delta_load<E>(k, p.k, s, i, h, 0, K, K);
    delta_load<E>(v, p.v, s, i, h, c0, n, kCols);
    if (with_do) delta_load<E>(d_o, p.d_o, s, i, h, c0, n, kCols);
    q_inv = k_inv = 1.0f;
    if (p.l2norm) q_inv = delta_normalize(q, K), k_inv = delta_normalize(k, K);
    for (int r = 0; r < K; ++r) qn[r] = q[r], q[r] *= p.scale;
    beta = delta_scalar<E>(p.beta, s, i, h);
    live = true;
    a = p.decay.data ? exp_approx<float>(delta_log_decay(delta_scalar<E>(p.decay, s, i, h), &live)) : 1.0f;
    reset = delta_resets(p, s, i);
  }
};

EJK_HD float delta_hsum(vf x) {
  float s = 0;
  for (int l = 0; l < kVecWidth; ++l) s += x[l];
  return s;
}

// P = the decayed prior (into S, which may be prev), then u = P^T k and d = beta (v - u); S = P + k d^T.
template <class Cfg, int kCols>
EJK_HD void delta_step(float* S, const float* prev, const DeltaToken<Cfg, kCols>& x, float* u, float* d) {
  constexpr int K = Cfg::kK;
  const float a = x.reset ? 0.0f : x.a;
  for (int c = 0; c < kCols; c += kVecWidth) vstore(u + c, vf{});
  for (int r = 0; r < K; ++r)
    for (int c = 0; c < kCols; c += kVecWidth) {
      const vf pr = vload(prev + r * kCols + c) * a;
      vstore(S + r * kCols + c, pr);
      vstore(u + c, vload(u + c) + x.k[r] * pr);
    }
  for (int c = 0; c < kCols; c += kVecWidth) vstore(d + c, x.beta * (vload(x.v + c) - vload(u + c)));
  for (int r = 0; r < K; ++r)
    for (int c = 0; c < kCols; c += kVecWidth)
      vstore(S + r * kCols + c, delta_update(vload(S + r * kCols + c), x.k[r], vload(d + c)));
}

template <class Cfg, int kCols>
EJK_HD void delta_load_state(float* S, const DeltaParams& p, const float* state, i64 s, i64 h, i64 c0, i64 n) {
  for (int r = 0; r < Cfg::kK; ++r)
    for (int c = 0; c < kCols; ++c)
      S[r * kCols + c] = state != nullptr && c < n ? state[delta_state_at(p, s, h) + r * p.dv_ + c0 + c] : 0.0f;
}

template <class Cfg, int kCols>
EJK_HD void delta_store_state(float* state, const DeltaParams& p, const float* S, i64 s, i64 h, i64 c0, i64 n) {
  if (state == nullptr) return;
  for (int r = 0; r < Cfg::kK; ++r)
    for (int c = 0; c < n; ++c) state[delta_state_at(p, s, h) + r * p.dv_ + c0 + c] = S[r * kCols + c];
}

template <class Cfg>
EJK_HD void delta_fwd_task(const DeltaParams& p, i64 s, i64 h, i64 tile) {
  constexpr int K = Cfg::kK, W = (int)kDeltaCpuColumns;
  const i64 c0 = tile * W, n = min_of((i64)W, p.dv_ - c0);
  float S[K * W], u[W], d[W], o[W];
  DeltaToken<Cfg, W> x;
  delta_load_state<Cfg, W>(S, p, p.h0, s, h, c0, n);
  for (i64 i = 0; i < p.seqlen; ++i) {
    x.load(p, s, i, h, c0, n, false);
    delta_step<Cfg, W>(S, S, x, u, d);
    for (int c = 0; c < W; c += kVecWidth) {
      vf acc = vf{};
      for (int r = 0; r < K; ++r) acc += x.q[r] * vload(S + r * W + c);
      vstore(o + c, acc);
    }
    delta_store<Cfg::kElem>(p.o, s, i, h, o, n, c0);
  }
  delta_store_state<Cfg, W>(p.ht, p, S, s, h, c0, n);
}

// The gradients of token i from D (the gradient of the state after the step), the state after
// the step S and the one before prev; then D is carried back to before the step.
template <class Cfg, int kCols>
EJK_HD void delta_bwd_token(const DeltaParams& p, i64 s, i64 i, i64 h, float* D, const float* S, const float* prev,
                            DeltaToken<Cfg, kCols>& x, float* u, float* d) {
  constexpr int K = Cfg::kK;
  constexpr ElemKind E = Cfg::kElem;
  const float a = x.reset ? 0.0f : x.a;
  float dq[K], dk[K], dd[kCols], du[kCols], dv[kCols];
  // u and d of this step, from the prior.
  for (int c = 0; c < kCols; c += kVecWidth) vstore(u + c, vf{});
  for (int r = 0; r < K; ++r)
    for (int c = 0; c < kCols; c += kVecWidth) vstore(u + c, vload(u + c) + x.k[r] * a * vload(prev + r * kCols + c));
  for (int c = 0; c < kCols; c += kVecWidth) vstore(d + c, x.beta * (vload(x.v + c) - vload(u + c)));
  // D += q do^T; dq = S do; dd = D^T k.
  for (int c = 0; c < kCols; c += kVecWidth) vstore(dd + c, vf{});
  for (int r = 0; r < K; ++r) {
    float* Dr = D + r * kCols;
    vf sq = vf{};
    for (int c = 0; c < kCols; c += kVecWidth) {
      const vf dr = vload(Dr + c) + x.q[r] * vload(x.d_o + c);
      vstore(Dr + c, dr);
      sq += vload(x.d_o + c) * vload(S + r * kCols + c);
      vstore(dd + c, vload(dd + c) + x.k[r] * dr);
    }
    dq[r] = p.scale * delta_hsum(sq);
  }
  float dbeta = 0;
  for (int c = 0; c < kCols; ++c) dbeta += dd[c] * (x.v[c] - u[c]), dv[c] = x.beta * dd[c], du[c] = -x.beta * dd[c];
  // dk = D d + P du; dP = D + k du^T; ddecay = sum(dP * P); D = a dP.
  float dlog = 0;
  for (int r = 0; r < K; ++r) {
    float* Dr = D + r * kCols;
    vf sk = vf{}, sl = vf{};
    for (int c = 0; c < kCols; c += kVecWidth) {
      const vf pr = vload(prev + r * kCols + c) * a;
      const vf dp = vload(Dr + c) + x.k[r] * vload(du + c);
      sk += vload(Dr + c) * vload(d + c) + pr * vload(du + c);
      sl += dp * pr;
      vstore(Dr + c, dp * a);
    }
    dk[r] = delta_hsum(sk), dlog += delta_hsum(sl);
  }
  if (p.l2norm) {
    delta_normalize_bwd(dq, x.qn, x.q_inv, K);
    delta_normalize_bwd(dk, x.k, x.k_inv, K);
  }
  const float dlog_out = x.live && !x.reset ? dlog : 0.0f;
  delta_store<E>(p.dq, s, i, h, dq, K);
  delta_store<E>(p.dk, s, i, h, dk, K);
  delta_store<E>(p.dv, s, i, h, dv, p.dv_);
  delta_store<E>(p.dbeta, s, i, h, &dbeta, 1);
  delta_store<E>(p.ddecay, s, i, h, &dlog_out, 1);
}

template <class Cfg>
EJK_HD void delta_bwd_unit(const DeltaParams& p, i64 s, i64 h, float* lane) {
  constexpr int K = Cfg::kK, W = (int)delta_cpu_row(Cfg::kV);
  constexpr i64 kState = (i64)K * W;
  float *S = lane, *D = lane + kState, *ckpt = lane + 2 * kState, *states = ckpt + p.chunks_cap * kState;
  float u[W], d[W];
  DeltaToken<Cfg, W> x;
  const i64 len = p.seqlen, chunks = ceil_div(len, p.chunk);
  delta_load_state<Cfg, W>(S, p, p.h0, s, h, 0, p.dv_);
  for (i64 i = 0; i < len; ++i) {
    if (i % p.chunk == 0) __builtin_memcpy(ckpt + i / p.chunk * kState, S, sizeof(float) * kState);
    x.load(p, s, i, h, 0, p.dv_, false);
    delta_step<Cfg, W>(S, S, x, u, d);
  }
  delta_load_state<Cfg, W>(D, p, p.dht, s, h, 0, p.dv_);
  for (i64 c = chunks - 1; c >= 0; --c) {
    const i64 n0 = c * p.chunk, n1 = min_of(len, n0 + p.chunk);
    const float* start = ckpt + c * kState;
    for (i64 i = n0; i < n1; ++i) {
      x.load(p, s, i, h, 0, p.dv_, false);
      delta_step<Cfg, W>(states + (i - n0) * kState, i == n0 ? start : states + (i - n0 - 1) * kState, x, u, d);
    }
    for (i64 i = n1 - 1; i >= n0; --i) {
      x.load(p, s, i, h, 0, p.dv_, true);
      const float* prev = i == n0 ? start : states + (i - n0 - 1) * kState;
      delta_bwd_token<Cfg, W>(p, s, i, h, D, states + (i - n0) * kState, prev, x, u, d);
    }
  }
  delta_store_state<Cfg, W>(p.dh0, p, D, s, h, 0, p.dv_);
}

// A variant's template passes a type of its own (internal linkage), so objects built for
// different targets never share one weak copy of these loops.
template <class Cfg>
void delta_tasks(const DeltaParams& p, long long task_begin, long long task_end) {
  for (long long t = task_begin; t < task_end; ++t) {
    if constexpr (Cfg::kBackward) {
      float* lane = p.work + t * delta_cpu_lane_floats(Cfg::kK, Cfg::kV, p.chunks_cap, p.chunk);
      for (i64 w = t; w < p.sequences * p.heads; w += p.lanes) delta_bwd_unit<Cfg>(p, w / p.heads, w % p.heads, lane);
    } else {
      const i64 per_seq = p.heads * p.v_tiles;
      delta_fwd_task<Cfg>(p, t / per_seq, t / p.v_tiles % p.heads, t % p.v_tiles);
    }
  }
}

}  // namespace ejk::cpu
