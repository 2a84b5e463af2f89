// CPU selective scan (Mamba-1), forward and backward (semantics: common/ssm1_params.h).
//
// Forward: one task is (sequence, tile of kSsm1CpuChannels channels); the tile's states stay on
// the worker's stack and walk the sequence. Backward: one task per sequence with a workspace of
// its own: a forward pass keeps every channel's state before each C-th token, then chunk by chunk
// from the last the chunk's states are recomputed and dh is carried back through them. dA and
// dD span the sequences: each task writes its share and the last one to finish adds the shares
// in sequence order, so the sums do not depend on the schedule.
//
// Header only and freestanding (no standard headers): it is also JIT-compiled in-process.
#pragma once
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/ssm1_params.h"
#include "ejk/kernels/cpu/math.h"
#include "ejk/kernels/cpu/types.h"

namespace ejk::cpu {

// Cfg: kElem, kN, kGate, kBackward.
template <ElemKind E> EJK_HD float ssm1_read(const Ssm1Tokens& t, i64 s, i64 i, i64 c) {
  return to_f32<E>(static_cast<const Elem<E>*>(t.data)[ssm1_at(t, s, i) + c]);
}

template <ElemKind E> EJK_HD void ssm1_write(const Ssm1Tokens& t, i64 s, i64 i, i64 c, float v) {
  if (t.data != nullptr) static_cast<Elem<E>*>(t.data)[ssm1_at(t, s, i) + c] = from_f32<E>(v);
}

EJK_HD float ssm1_exp(float x) { return exp_approx<float>(x); }

// A token's B and C rows.
template <class Cfg> struct Ssm1Row {
  float b[Cfg::kN], c[Cfg::kN];
  EJK_HD void load(const Ssm1Params& p, i64 s, i64 i) {
    for (int j = 0; j < Cfg::kN; ++j) b[j] = ssm1_read<Cfg::kElem>(p.B, s, i, j), c[j] = ssm1_read<Cfg::kElem>(p.C, s, i, j);
  }
};

// Channel ch's state h (N floats) = one step of token i from prev (may be h itself).
template <class Cfg>
EJK_HD void ssm1_channel_step(float* h, const float* prev, const Ssm1Params& p, const Ssm1Row<Cfg>& row, i64 s, i64 i,
                              i64 ch) {
  constexpr ElemKind E = Cfg::kElem;
  const float x = ssm1_read<E>(p.x, s, i, ch), dt = ssm1_read<E>(p.dt, s, i, ch), dtx = dt * x;
  const float* A = p.A + ch * Cfg::kN;
  for (int j = 0; j < Cfg::kN; ++j) h[j] = ssm1_update(prev[j], ssm1_exp(A[j] * dt), dtx, row.b[j]);
}

template <class Cfg>
EJK_HD void ssm1_fwd_task(const Ssm1Params& p, i64 s, i64 tile) {
  constexpr int N = Cfg::kN, W = (int)kSsm1CpuChannels;
  constexpr ElemKind E = Cfg::kElem;
  const i64 c0 = tile * W, nc = min_of((i64)W, p.dim - c0);
  float h[W * N];
  for (i64 c = 0; c < nc; ++c)
    for (int j = 0; j < N; ++j) h[c * N + j] = p.h0 != nullptr ? p.h0[(s * p.dim + c0 + c) * N + j] : 0.0f;
  Ssm1Row<Cfg> row;
  const TokenSpan sp = ssm1_span(p.cu_seqlens, p.seqlen, s);
  for (i64 i = sp.begin; i < sp.end; ++i) {
    row.load(p, s, i);
    for (i64 c = 0; c < nc; ++c) {
      const i64 ch = c0 + c;
      float* hc = h + c * N;
      ssm1_channel_step<Cfg>(hc, hc, p, row, s, i, ch);
      float y = p.D[ch] * ssm1_read<E>(p.x, s, i, ch);
      for (int j = 0; j < N; ++j) y += hc[j] * row.c[j];
      if constexpr (Cfg::kGate) {
        const float g = ssm1_read<E>(p.gate, s, i, ch);
        y *= g * ssm1_sigmoid(g, ssm1_exp);
      }
      ssm1_write<E>(p.y, s, i, ch, y);
    }
  }
  if (p.ht != nullptr)
    for (i64 c = 0; c < nc; ++c)
      for (int j = 0; j < N; ++j) p.ht[(s * p.dim + c0 + c) * N + j] = h[c * N + j];
}

// Every channel's state (dim x N floats) = one step of token i from prev.
template <class Cfg> EJK_HD void ssm1_step_all(float* h, const float* prev, const Ssm1Params& p, i64 s, i64 i) {
  Ssm1Row<Cfg> row;
  row.load(p, s, i);
  for (i64 ch = 0; ch < p.dim; ++ch) ssm1_channel_step<Cfg>(h + ch * Cfg::kN, prev + ch * Cfg::kN, p, row, s, i, ch);
}

// Token i's gradients from dh (the state's gradient after the step), the state after the step
// and the one before; dh is carried back and the sequence's dA, dD shares accumulate.
template <class Cfg>
EJK_HD void ssm1_bwd_token(const Ssm1Params& p, i64 s, i64 i, float* dh, const float* cur, const float* prev,
                           float* dA_share, float* dD_share) {
  constexpr int N = Cfg::kN;
  constexpr ElemKind E = Cfg::kElem;
  Ssm1Row<Cfg> row;
  row.load(p, s, i);
  float dB[N], dC[N];
  for (int j = 0; j < N; ++j) dB[j] = 0, dC[j] = 0;
  for (i64 ch = 0; ch < p.dim; ++ch) {
    const float x = ssm1_read<E>(p.x, s, i, ch), dt = ssm1_read<E>(p.dt, s, i, ch), dout = ssm1_read<E>(p.d_y, s, i, ch);
    const float* hc = cur + ch * N;
    const float* hp = prev + ch * N;
    const float* A = p.A + ch * N;
    float gy = dout;
    if constexpr (Cfg::kGate) {
      float y = p.D[ch] * x;
      for (int j = 0; j < N; ++j) y += hc[j] * row.c[j];
      const float g = ssm1_read<E>(p.gate, s, i, ch), sig = ssm1_sigmoid(g, ssm1_exp);
      gy = dout * g * sig;
      ssm1_write<E>(p.dgate, s, i, ch, dout * y * ssm1_silu_grad(g, sig));
    } else {
      ssm1_write<E>(p.dgate, s, i, ch, 0.0f);  // a gate nothing reads
    }
    dD_share[ch] += gy * x;
    float dx = gy * p.D[ch], ddt = 0;
    float* d = dh + ch * N;
    float* dAc = dA_share + ch * N;
    for (int j = 0; j < N; ++j) {
      const float dj = d[j] + gy * row.c[j], a = ssm1_exp(A[j] * dt);
      dC[j] += gy * hc[j];
      ddt += dj * (A[j] * a * hp[j] + x * row.b[j]);
      dx += dj * dt * row.b[j];
      dAc[j] += dj * a * dt * hp[j];
      dB[j] += dj * dt * x;
      d[j] = dj * a;
    }
    ssm1_write<E>(p.dx, s, i, ch, dx);
    ssm1_write<E>(p.ddt, s, i, ch, ddt);
  }
  for (int j = 0; j < N; ++j) ssm1_write<E>(p.dB, s, i, j, dB[j]), ssm1_write<E>(p.dC, s, i, j, dC[j]);
}

template <class Cfg> EJK_HD void ssm1_bwd_task(const Ssm1Params& p, i64 s) {
  constexpr int N = Cfg::kN;
  const i64 state = p.dim * N;
  float* dh = p.work + s * ssm1_cpu_task_floats(p.dim, N, p.chunks_cap, p.chunk);
  float *ckpt = dh + state, *states = ckpt + p.chunks_cap * state;
  float* dA_share = p.partial + s * p.dim * (N + 1);
  float* dD_share = dA_share + state;
  for (i64 e = 0; e < state + p.dim; ++e) dA_share[e] = 0;
  // The running state lives in the chunk states' first slot until the backward sweep.
  float* run = states;
  for (i64 e = 0; e < state; ++e) run[e] = p.h0 != nullptr ? p.h0[s * state + e] : 0.0f;
  // Checkpoints and chunks count from the sequence's first token.
  const TokenSpan sp = ssm1_span(p.cu_seqlens, p.seqlen, s);
  for (i64 i = sp.begin; i < sp.end; ++i) {
    const i64 step = i - sp.begin;
    if (step % p.chunk == 0) __builtin_memcpy(ckpt + step / p.chunk * state, run, sizeof(float) * state);
    ssm1_step_all<Cfg>(run, run, p, s, i);
  }
  for (i64 e = 0; e < state; ++e) dh[e] = p.dht != nullptr ? p.dht[s * state + e] : 0.0f;
  for (i64 k = ceil_div(sp.end - sp.begin, p.chunk) - 1; k >= 0; --k) {
    const i64 n0 = sp.begin + k * p.chunk, n1 = min_of(sp.end, n0 + p.chunk);
    const float* start = ckpt + k * state;
    for (i64 i = n0; i < n1; ++i) ssm1_step_all<Cfg>(states + (i - n0) * state, i == n0 ? start : states + (i - n0 - 1) * state, p, s, i);
    for (i64 i = n1 - 1; i >= n0; --i)
      ssm1_bwd_token<Cfg>(p, s, i, dh, states + (i - n0) * state, i == n0 ? start : states + (i - n0 - 1) * state,
                          dA_share, dD_share);
  }
  if (p.dh0 != nullptr)
    for (i64 e = 0; e < state; ++e) p.dh0[s * state + e] = dh[e];
}

// The last task to finish adds the sequences' shares, in sequence order.
EJK_HD void ssm1_sum_shares(const Ssm1Params& p) {
  const i64 state = p.dim * p.nstate, per = p.dim * (p.nstate + 1);
  for (i64 e = 0; e < per; ++e) {
    float acc = 0;
    for (i64 s = 0; s < p.batch; ++s) acc += p.partial[s * per + e];
    float* out = e < state ? p.dA : p.dD;
    if (out != nullptr) out[e < state ? e : e - state] = acc;
  }
}

// A variant's template passes a type of its own (internal linkage), so objects built for
// different targets never share one weak copy of these loops.
template <class Cfg>
void ssm1_tasks(const Ssm1Params& p, long long task_begin, long long task_end) {
  for (long long t = task_begin; t < task_end; ++t) {
    if constexpr (Cfg::kBackward) {
      ssm1_bwd_task<Cfg>(p, t);
      if (__atomic_add_fetch(p.done, 1u, __ATOMIC_ACQ_REL) == u32(p.batch)) ssm1_sum_shares(p);
    } else {
      ssm1_fwd_task<Cfg>(p, t / p.tiles, t % p.tiles);
    }
  }
}

}  // namespace ejk::cpu
