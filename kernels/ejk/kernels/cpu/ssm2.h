// CPU Mamba-2 scan, forward and backward (semantics: common/ssm2_params.h).
//
// Forward: one task is (sequence, head); each head dim's N-float state is independent, so the
// task walks the sequence once per head dim with that state on the stack. Backward: one task per
// sequence with a workspace of its own, as Mamba-1's (cpu/ssm1.h): checkpoints every C tokens,
// then per chunk from the last the states are recomputed and dh is carried back; db, dc and ddt
// sum within the task; da and dd are summed over the sequences' shares by the last task.
//
// Header only and freestanding (no standard headers): it is also JIT-compiled in-process.
#pragma once
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/ssm2_params.h"
#include "ejk/kernels/cpu/math.h"
#include "ejk/kernels/cpu/types.h"

namespace ejk::cpu {

// Cfg: kElem, kN, kBackward.
template <ElemKind E> EJK_HD float ssm2_read(const Ssm2Tokens& t, i64 s, i64 i, i64 h, i64 c) {
  return to_f32<E>(static_cast<const Elem<E>*>(t.data)[ssm2_at(t, s, i, h) + c]);
}

template <ElemKind E> EJK_HD void ssm2_write(const Ssm2Tokens& t, i64 s, i64 i, i64 h, i64 c, float v) {
  if (t.data != nullptr) static_cast<Elem<E>*>(t.data)[ssm2_at(t, s, i, h) + c] = from_f32<E>(v);
}

template <class Cfg> EJK_HD void ssm2_fwd_task(const Ssm2Params& p, i64 s, i64 h) {
  constexpr int N = Cfg::kN;
  constexpr ElemKind E = Cfg::kElem;
  const i64 g = ssm2_group(p, h), unit = (s * p.heads + h) * p.hdim;
  const float A = p.A[h], D = p.D[h];
  const TokenSpan sp = ssm1_span(p.cu_seqlens, p.seqlen, s);
  for (i64 q = 0; q < p.hdim; ++q) {
    float st[N];
    for (int j = 0; j < N; ++j) st[j] = p.h0 != nullptr ? p.h0[(unit + q) * N + j] : 0.0f;
    for (i64 i = sp.begin; i < sp.end; ++i) {
      const float dt = ssm2_read<E>(p.dt, s, i, h, 0), x = ssm2_read<E>(p.x, s, i, h, q);
      const float e = exp_approx<float>(A * dt), dtx = dt * x;
      float y = D * x;
      for (int j = 0; j < N; ++j) {
        st[j] = ssm1_update(st[j], e, dtx, ssm2_read<E>(p.B, s, i, g, j));
        y += st[j] * ssm2_read<E>(p.C, s, i, g, j);
      }
      ssm2_write<E>(p.y, s, i, h, q, y);
    }
    if (p.ht != nullptr)
      for (int j = 0; j < N; ++j) p.ht[(unit + q) * N + j] = st[j];
  }
}

// Every (head, head dim)'s state (H x P x N floats) = one step of token i from prev.
template <class Cfg> EJK_HD void ssm2_step_all(float* st, const float* prev, const Ssm2Params& p, i64 s, i64 i) {
  constexpr int N = Cfg::kN;
  constexpr ElemKind E = Cfg::kElem;
  for (i64 h = 0; h < p.heads; ++h) {
    const i64 g = ssm2_group(p, h);
    float b[N];
    for (int j = 0; j < N; ++j) b[j] = ssm2_read<E>(p.B, s, i, g, j);
    const float dt = ssm2_read<E>(p.dt, s, i, h, 0), e = exp_approx<float>(p.A[h] * dt);
    for (i64 q = 0; q < p.hdim; ++q) {
      const i64 at = (h * p.hdim + q) * N;
      const float dtx = dt * ssm2_read<E>(p.x, s, i, h, q);
      for (int j = 0; j < N; ++j) st[at + j] = ssm1_update(prev[at + j], e, dtx, b[j]);
    }
  }
}

// Token i's gradients from dh (after the step), the states after and before it; dh is carried
// back and the sequence's da, dd shares accumulate. db, dc: [G][N] floats of scratch.
template <class Cfg>
EJK_HD void ssm2_bwd_token(const Ssm2Params& p, i64 s, i64 i, float* dh, const float* cur, const float* prev,
                           float* share, float* db, float* dc) {
  constexpr int N = Cfg::kN;
  constexpr ElemKind E = Cfg::kElem;
  for (i64 e = 0; e < p.groups * N; ++e) db[e] = 0, dc[e] = 0;
  for (i64 h = 0; h < p.heads; ++h) {
    const i64 g = ssm2_group(p, h);
    float b[N], c[N];
    for (int j = 0; j < N; ++j) b[j] = ssm2_read<E>(p.B, s, i, g, j), c[j] = ssm2_read<E>(p.C, s, i, g, j);
    const float A = p.A[h], dt = ssm2_read<E>(p.dt, s, i, h, 0), e = exp_approx<float>(A * dt);
    float ddt = 0, da = 0, dd = 0;
    for (i64 q = 0; q < p.hdim; ++q) {
      const i64 at = (h * p.hdim + q) * N;
      const float x = ssm2_read<E>(p.x, s, i, h, q), dy = ssm2_read<E>(p.d_y, s, i, h, q);
      dd += dy * x;
      float dx = dy * p.D[h];
      for (int j = 0; j < N; ++j) {
        const float dj = dh[at + j] + dy * c[j];
        dc[g * N + j] += dy * cur[at + j];
        ddt += dj * (A * e * prev[at + j] + x * b[j]);
        da += dj * e * dt * prev[at + j];
        dx += dj * dt * b[j];
        db[g * N + j] += dj * dt * x;
        dh[at + j] = dj * e;
      }
      ssm2_write<E>(p.dx, s, i, h, q, dx);
    }
    ssm2_write<E>(p.ddt, s, i, h, 0, ddt);
    share[h] += da, share[p.heads + h] += dd;
  }
  for (i64 g = 0; g < p.groups; ++g)
    for (int j = 0; j < N; ++j) ssm2_write<E>(p.dB, s, i, g, j, db[g * N + j]), ssm2_write<E>(p.dC, s, i, g, j, dc[g * N + j]);
}

template <class Cfg> EJK_HD void ssm2_bwd_task(const Ssm2Params& p, i64 s) {
  constexpr int N = Cfg::kN;
  const i64 state = p.heads * p.hdim * N;
  float* dh = p.work + s * (ssm2_cpu_task_floats(p.heads, p.hdim, N, p.chunks_cap, p.chunk) + 2 * p.groups * N);
  float *ckpt = dh + state, *states = ckpt + p.chunks_cap * state, *db = states + p.chunk * state, *dc = db + p.groups * N;
  float* share = p.partial + s * 2 * p.heads;
  for (i64 e = 0; e < 2 * p.heads; ++e) share[e] = 0;
  float* run = states;  // the running state lives in the chunk states' first slot until the sweep
  for (i64 e = 0; e < state; ++e) run[e] = p.h0 != nullptr ? p.h0[s * state + e] : 0.0f;
  // Checkpoints and chunks count from the sequence's first token.
  const TokenSpan sp = ssm1_span(p.cu_seqlens, p.seqlen, s);
  for (i64 i = sp.begin; i < sp.end; ++i) {
    const i64 step = i - sp.begin;
    if (step % p.chunk == 0) __builtin_memcpy(ckpt + step / p.chunk * state, run, sizeof(float) * state);
    ssm2_step_all<Cfg>(run, run, p, s, i);
  }
  for (i64 e = 0; e < state; ++e) dh[e] = p.dht != nullptr ? p.dht[s * state + e] : 0.0f;
  for (i64 k = ceil_div(sp.end - sp.begin, p.chunk) - 1; k >= 0; --k) {
    const i64 n0 = sp.begin + k * p.chunk, n1 = min_of(sp.end, n0 + p.chunk);
    const float* start = ckpt + k * state;
    for (i64 i = n0; i < n1; ++i) ssm2_step_all<Cfg>(states + (i - n0) * state, i == n0 ? start : states + (i - n0 - 1) * state, p, s, i);
    for (i64 i = n1 - 1; i >= n0; --i)
      ssm2_bwd_token<Cfg>(p, s, i, dh, states + (i - n0) * state, i == n0 ? start : states + (i - n0 - 1) * state,
                          share, db, dc);
  }
  if (p.dh0 != nullptr)
    for (i64 e = 0; e < state; ++e) p.dh0[s * state + e] = dh[e];
}

EJK_HD void ssm2_sum_shares(const Ssm2Params& p) {
  for (i64 e = 0; e < 2 * p.heads; ++e) {
    float acc = 0;
    for (i64 s = 0; s < p.batch; ++s) acc += p.partial[s * 2 * p.heads + e];
    float* out = e < p.heads ? p.dA : p.dD;
    if (out != nullptr) out[e < p.heads ? e : e - p.heads] = acc;
  }
}

template <class Cfg>
void ssm2_tasks(const Ssm2Params& p, long long task_begin, long long task_end) {
  for (long long t = task_begin; t < task_end; ++t) {
    if constexpr (Cfg::kBackward) {
      ssm2_bwd_task<Cfg>(p, t);
      if (__atomic_add_fetch(p.done, 1u, __ATOMIC_ACQ_REL) == u32(p.batch)) ssm2_sum_shares(p);
    } else {
      ssm2_fwd_task<Cfg>(p, t / p.heads, t % p.heads);
    }
  }
}

}  // namespace ejk::cpu
