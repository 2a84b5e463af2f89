// CPU Mamba-2 scan, forward and backward (semantics: common/ssm2_params.h).
//
// Forward: one task is (sequence, head); each head dim's N-float state is independent, so the
// task walks the sequence once per block of kSsm2Rows head dims with their states on the stack. Backward: one task per
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
#include "ejk/kernels/cpu/vec.h"

namespace ejk::cpu {

// Cfg: kElem, kN, kBackward.
template <ElemKind E> EJK_HD float ssm2_read(const Ssm2Tokens& t, i64 s, i64 i, i64 h, i64 c) {
  return to_f32<E>(static_cast<const Elem<E>*>(t.data)[ssm2_at(t, s, i, h) + c]);
}

// A token's contiguous row of N elements (B or C of group g) as floats.
template <ElemKind E, int N> EJK_HD void ssm2_row_f32(const Ssm2Tokens& t, i64 s, i64 i, i64 g, float* out) {
  const Elem<E>* row = static_cast<const Elem<E>*>(t.data) + ssm2_at(t, s, i, g);
  for (int j = 0; j < N; ++j) out[j] = to_f32<E>(row[j]);
}

template <ElemKind E> EJK_HD void ssm2_write(const Ssm2Tokens& t, i64 s, i64 i, i64 h, i64 c, float v) {
  if (t.data != nullptr) static_cast<Elem<E>*>(t.data)[ssm2_at(t, s, i, h) + c] = from_f32<E>(v);
}

// Head dims that share one pass over the tokens: a token's B and C rows are converted once per
// block of rows, and each row's N-float state is updated and read out as vectors.
inline constexpr int kSsm2Rows = 8;

// One head dim's step: the state row updated in place; returns its readout h . c.
template <int N> EJK_HD float ssm2_row_step(float* st, float e, float dtx, const float* b, const float* c) {
  constexpr int kVec = N / kVecWidth * kVecWidth;
  const vf ev = splat<vf>(e), dv = splat<vf>(dtx);
  vf acc = vf{};
  for (int j = 0; j < kVec; j += kVecWidth) {
    const vf h = ssm1_update(vload(st + j), ev, dv, vload(b + j));
    vstore(st + j, h);
    acc += h * vload(c + j);
  }
  float y = reduce_add(acc);
  for (int j = kVec; j < N; ++j) {
    st[j] = ssm1_update(st[j], e, dtx, b[j]);
    y += st[j] * c[j];
  }
  return y;
}

template <class Cfg> EJK_HD void ssm2_fwd_task(const Ssm2Params& p, i64 s, i64 h) {
  constexpr int N = Cfg::kN;
  constexpr ElemKind E = Cfg::kElem;
  const i64 g = ssm2_group(p, h), unit = (s * p.heads + h) * p.hdim;
  const float A = p.A[h], D = p.D[h];
  const TokenSpan sp = ssm1_span(p.cu_seqlens, p.seqlen, s);
  for (i64 q0 = 0; q0 < p.hdim; q0 += kSsm2Rows) {
    const int rows = int(min_of<i64>(kSsm2Rows, p.hdim - q0));
    float st[kSsm2Rows][N];
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < N; ++j) st[r][j] = p.h0 != nullptr ? p.h0[(unit + q0 + r) * N + j] : 0.0f;
    for (i64 i = sp.begin; i < sp.end; ++i) {
      float b[N], c[N];
      ssm2_row_f32<E, N>(p.B, s, i, g, b), ssm2_row_f32<E, N>(p.C, s, i, g, c);
      const float dt = ssm2_read<E>(p.dt, s, i, h, 0), e = exp_approx<float>(A * dt);
      for (int r = 0; r < rows; ++r) {
        const float x = ssm2_read<E>(p.x, s, i, h, q0 + r);
        ssm2_write<E>(p.y, s, i, h, q0 + r, D * x + ssm2_row_step<N>(st[r], e, dt * x, b, c));
      }
    }
    if (p.ht != nullptr)
      for (int r = 0; r < rows; ++r)
        for (int j = 0; j < N; ++j) p.ht[(unit + q0 + r) * N + j] = st[r][j];
  }
}

// Every (head, head dim)'s state (H x P x N floats) = one step of token i from prev.
template <class Cfg> EJK_HD void ssm2_step_all(float* st, const float* prev, const Ssm2Params& p, i64 s, i64 i) {
  constexpr int N = Cfg::kN;
  constexpr ElemKind E = Cfg::kElem;
  for (i64 h = 0; h < p.heads; ++h) {
    const i64 g = ssm2_group(p, h);
    float b[N];
    ssm2_row_f32<E, N>(p.B, s, i, g, b);
    const float dt = ssm2_read<E>(p.dt, s, i, h, 0), e = exp_approx<float>(p.A[h] * dt);
    for (i64 q = 0; q < p.hdim; ++q) {
      const i64 at = (h * p.hdim + q) * N;
      const float dtx = dt * ssm2_read<E>(p.x, s, i, h, q);
      for (int j = 0; j < N; ++j) st[at + j] = ssm1_update(prev[at + j], e, dtx, b[j]);
    }
  }
}

// Sums over one head dim's state row in the backward: dj . prev and dj . b, dj = dh + dy c.
struct Ssm2RowSums {
  float prev, b;
};

// One head dim's state row, backward through token i: dh (after the step) carried back in
// place (dj e), db += dj dt x and dc += dy h; returns the row's sums for ddt, da and dx.
template <int N>
EJK_HD Ssm2RowSums ssm2_row_back(float* dh, const float* cur, const float* prev, const float* b, const float* c,
                                 float dy, float dtx, float e, float* db, float* dc) {
  constexpr int kVec = N / kVecWidth * kVecWidth;
  const vf dyv = splat<vf>(dy), dtxv = splat<vf>(dtx), ev = splat<vf>(e);
  vf sp = vf{}, sb = vf{};
  for (int j = 0; j < kVec; j += kVecWidth) {
    const vf dj = vload(dh + j) + dyv * vload(c + j), bj = vload(b + j);
    vstore(dc + j, vload(dc + j) + dyv * vload(cur + j));
    vstore(db + j, vload(db + j) + dj * dtxv);
    vstore(dh + j, dj * ev);
    sp += dj * vload(prev + j), sb += dj * bj;
  }
  Ssm2RowSums sums{reduce_add(sp), reduce_add(sb)};
  for (int j = kVec; j < N; ++j) {
    const float dj = dh[j] + dy * c[j];
    dc[j] += dy * cur[j], db[j] += dj * dtx, dh[j] = dj * e;
    sums.prev += dj * prev[j], sums.b += dj * b[j];
  }
  return sums;
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
    ssm2_row_f32<E, N>(p.B, s, i, g, b), ssm2_row_f32<E, N>(p.C, s, i, g, c);
    const float A = p.A[h], dt = ssm2_read<E>(p.dt, s, i, h, 0), e = exp_approx<float>(A * dt);
    float ddt = 0, da = 0, dd = 0;
    for (i64 q = 0; q < p.hdim; ++q) {
      const i64 at = (h * p.hdim + q) * N;
      const float x = ssm2_read<E>(p.x, s, i, h, q), dy = ssm2_read<E>(p.d_y, s, i, h, q);
      const Ssm2RowSums r = ssm2_row_back<N>(dh + at, cur + at, prev + at, b, c, dy, dt * x, e, db + g * N, dc + g * N);
      dd += dy * x;
      ddt += A * e * r.prev + x * r.b;
      da += e * dt * r.prev;
      ssm2_write<E>(p.dx, s, i, h, q, dy * p.D[h] + dt * r.b);
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
