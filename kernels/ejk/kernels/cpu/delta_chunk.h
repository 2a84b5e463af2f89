// CPU gated delta rule forward, chunked (semantics: common/delta_params.h; the algebra:
// docs/design/delta_chunked.md). A task is a lane of (sequence, head) units (w, w + lanes, ...)
// with a workspace of its own; per unit the state S [K, V] (f32) walks chunks of kDeltaChunk
// tokens. Per chunk, with G the decays' running log sum (restarted at segment starts), e_i =
// exp(G_i) before the chunk's first segment start (else 0) and M_ij = exp(G_i - G_j) within a
// segment:
//     (I + A) [W | U] = [beta e k | beta v],  A_ij = beta_i (k_i . k_j) M_ij  (j < i)
//     D = U - W S;  o_i = e_i S^T q_i + sum_{j <= i} M_ij (q_i . k_j) d_j
//     S = e_last S + sum_j M_last,j k_j d_j^T
// solved by forward substitution in f32. Every product is a sum of rows scaled by scalars
// (delta_rows), vectorized over contiguous rows; rows are padded to a multiple of 16 with zeros.
//
// Header only and freestanding (no standard headers): it is also JIT-compiled in-process.
#pragma once
#include "ejk/kernels/cpu/delta.h"

namespace ejk::cpu {

// Cfg: kElem, kK, kV.

// The lane's regions, in floats from its start (delta_cpu_chunk_lane_floats in all).
template <class Cfg> struct DeltaChunkLane {
  static constexpr int K = Cfg::kK, C = kDeltaChunk;
  static constexpr int KP = (int)delta_cpu_row(K), VP = (int)delta_cpu_row(Cfg::kV);
  float *S, *q, *k, *kt, *w, *u, *a, *pm;
  float *beta, *e, *coef;
  double* g;  // the running log decay, in double: M_ij takes differences of sums of up to 64 terms
  int* seg;   // segment starts in the chunk up to each token

  EJK_HD explicit DeltaChunkLane(float* lane) {
    S = lane, q = S + K * VP, k = q + C * KP, kt = k + C * KP, w = kt + KP * C, u = w + C * KP;
    a = u + C * VP, pm = a + C * C, beta = pm + C * C, e = beta + C, coef = e + C;
    g = reinterpret_cast<double*>(coef + max_of(max_of(KP, VP), C));
    seg = reinterpret_cast<int*>(g + C);
  }
};

// dst[0, N) (+)= sum_{t < count} coef[t] rows[t * pitch + 0, N): N a multiple of the vector
// width; column blocks of four vectors stay in registers while the rows stream by.
template <int N>
EJK_HD void delta_rows(float* dst, const float* coef, const float* rows, i64 pitch, i64 count, bool accumulate) {
  constexpr int kBlock = 4 * kVecWidth;
  int c = 0;
  for (; c + kBlock <= N; c += kBlock) {
    vf acc[4];
#pragma GCC unroll 4
    for (int b = 0; b < 4; ++b) acc[b] = accumulate ? vload(dst + c + b * kVecWidth) : vf{};
    for (i64 t = 0; t < count; ++t) {
      const float* r = rows + t * pitch + c;
#pragma GCC unroll 4
      for (int b = 0; b < 4; ++b) acc[b] += coef[t] * vload(r + b * kVecWidth);
    }
#pragma GCC unroll 4
    for (int b = 0; b < 4; ++b) vstore(dst + c + b * kVecWidth, acc[b]);
  }
  for (; c < N; c += kVecWidth) {
    vf acc = accumulate ? vload(dst + c) : vf{};
    for (i64 t = 0; t < count; ++t) acc += coef[t] * vload(rows + t * pitch + c);
    vstore(dst + c, acc);
  }
}

// delta_rows for m destination rows at once: dst[i * dpitch + 0, N) (+)= sum_{t < count}
// coef[i * cpitch + t] rows[t * pitch + 0, N). Four rows share each loaded row vector, which
// keeps the loop on the FMA units rather than the loads.
template <int N>
EJK_HD void delta_rows_m(float* dst, i64 dpitch, const float* coef, i64 cpitch, const float* rows, i64 pitch, i64 count,
                         i64 m, bool accumulate) {
  constexpr int kNb = kVecRegisters >= 32 ? 4 : 2, kBlock = kNb * kVecWidth;
  i64 i = 0;
  if constexpr (N % kBlock == 0)
    for (; i + 4 <= m; i += 4)
      for (int c = 0; c < N; c += kBlock) {
        vf acc[4][kNb];
#pragma GCC unroll 4
        for (int x = 0; x < 4; ++x)
#pragma GCC unroll 4
          for (int b = 0; b < kNb; ++b)
            acc[x][b] = accumulate ? vload(dst + (i + x) * dpitch + c + b * kVecWidth) : vf{};
        for (i64 t = 0; t < count; ++t) {
          const float* r = rows + t * pitch + c;
          vf rv[kNb];
#pragma GCC unroll 4
          for (int b = 0; b < kNb; ++b) rv[b] = vload(r + b * kVecWidth);
#pragma GCC unroll 4
          for (int x = 0; x < 4; ++x) {
            const float f = coef[(i + x) * cpitch + t];
#pragma GCC unroll 4
            for (int b = 0; b < kNb; ++b) acc[x][b] += f * rv[b];
          }
        }
#pragma GCC unroll 4
        for (int x = 0; x < 4; ++x)
#pragma GCC unroll 4
          for (int b = 0; b < kNb; ++b) vstore(dst + (i + x) * dpitch + c + b * kVecWidth, acc[x][b]);
      }
  for (; i < m; ++i) delta_rows<N>(dst + i * dpitch, coef + i * cpitch, rows, pitch, count, accumulate);
}

// The chunk's operands of tokens [i0, i0 + n): q (normalized, scaled), k (normalized) and its
// transpose, beta v (into u), beta, and the running log decay and segment count.
template <class Cfg>
EJK_HD void delta_chunk_load(const DeltaParams& p, DeltaChunkLane<Cfg>& L, i64 s, i64 h, i64 i0, i64 n) {
  constexpr ElemKind E = Cfg::kElem;
  constexpr int K = Cfg::kK, KP = DeltaChunkLane<Cfg>::KP, VP = DeltaChunkLane<Cfg>::VP, C = DeltaChunkLane<Cfg>::C;
  double g = 0;
  int seg = 0;
  for (i64 j = 0; j < n; ++j) {
    float* q = L.q + j * KP;
    float* k = L.k + j * KP;
    delta_load<E>(q, p.q, s, i0 + j, h, 0, K, KP);
    delta_load<E>(k, p.k, s, i0 + j, h, 0, K, KP);
    if (p.l2norm) delta_normalize(q, K), delta_normalize(k, K);
    for (int r = 0; r < K; ++r) q[r] *= p.scale, L.kt[r * C + j] = k[r];
    const float beta = L.beta[j] = delta_scalar<E>(p.beta, s, i0 + j, h);
    float* u = L.u + j * VP;
    delta_load<E>(u, p.v, s, i0 + j, h, 0, p.dv_, VP);
    for (int c = 0; c < VP; c += kVecWidth) vstore(u + c, beta * vload(u + c));
    bool live;
    const float gj = p.decay.data ? delta_log_decay(delta_scalar<E>(p.decay, s, i0 + j, h), &live) : 0.0f;
    // A segment start multiplies a zero state: its own decay drops out.
    if (delta_resets(p, s, i0 + j)) g = 0, ++seg;
    else g += gj;
    L.g[j] = g, L.seg[j] = seg;
    L.e[j] = seg == 0 ? exp_approx<float>((float)g) : 0.0f;
  }
}

// M_ij = exp(G_i - G_j) within one segment, else 0.
template <class Cfg> EJK_HD float delta_chunk_mask(const DeltaChunkLane<Cfg>& L, i64 i, i64 j) {
  return L.seg[i] == L.seg[j] ? exp_approx<float>((float)(L.g[i] - L.g[j])) : 0.0f;
}

// A (strictly lower) and the masked, decayed q k^T (lower, diagonal included) of the chunk's n
// tokens; both rows from k^T, so their inner loop runs over the chunk's tokens.
template <class Cfg> EJK_HD void delta_chunk_gram(DeltaChunkLane<Cfg>& L, i64 n) {
  constexpr int K = Cfg::kK, KP = DeltaChunkLane<Cfg>::KP, C = DeltaChunkLane<Cfg>::C;
  delta_rows_m<C>(L.a, C, L.k, KP, L.kt, C, K, n, false);
  delta_rows_m<C>(L.pm, C, L.q, KP, L.kt, C, K, n, false);
  for (i64 i = 0; i < n; ++i) {
    float* a = L.a + i * C;
    float* pm = L.pm + i * C;
    for (i64 j = 0; j <= i; ++j) {
      const float m = delta_chunk_mask(L, i, j);
      a[j] = j < i ? -L.beta[i] * m * a[j] : 0.0f;  // negated: the substitution subtracts
      pm[j] *= m;
    }
  }
}

// [W | U] = (I + A)^-1 [beta e k | beta v] by forward substitution, row by row in place.
template <class Cfg> EJK_HD void delta_chunk_solve(DeltaChunkLane<Cfg>& L, i64 n) {
  constexpr int KP = DeltaChunkLane<Cfg>::KP, VP = DeltaChunkLane<Cfg>::VP, C = DeltaChunkLane<Cfg>::C;
  for (i64 i = 0; i < n; ++i) {
    float* w = L.w + i * KP;
    const float* k = L.k + i * KP;
    const float be = L.beta[i] * L.e[i];
    for (int c = 0; c < KP; c += kVecWidth) vstore(w + c, be * vload(k + c));
    delta_rows<KP>(w, L.a + i * C, L.w, KP, i, true);
    delta_rows<VP>(L.u + i * VP, L.a + i * C, L.u, VP, i, true);
  }
}

// D = U - W S (into u), o = e q S + pm D, then S = e_last S + (M_last k)^T D.
template <class Cfg>
EJK_HD void delta_chunk_state(const DeltaParams& p, DeltaChunkLane<Cfg>& L, i64 s, i64 h, i64 i0, i64 n) {
  constexpr int K = Cfg::kK, KP = DeltaChunkLane<Cfg>::KP, VP = DeltaChunkLane<Cfg>::VP, C = DeltaChunkLane<Cfg>::C;
  // -W (into w) and e q (into q): the coefficients of the products with S.
  for (i64 i = 0; i < n; ++i)
    for (int r = 0; r < KP; ++r) L.w[i * KP + r] = -L.w[i * KP + r], L.q[i * KP + r] *= L.e[i];
  delta_rows_m<VP>(L.u, VP, L.w, KP, L.S, VP, K, n, true);
  float* o = L.w;  // W is spent: the outputs take its rows (VP <= KP) or are made one at a time
  if constexpr (VP <= KP) delta_rows_m<VP>(o, KP, L.q, KP, L.S, VP, K, n, false);
  for (i64 i = 0; i < n; ++i) {
    float* oi = VP <= KP ? o + i * KP : L.coef;
    if constexpr (VP > KP) delta_rows<VP>(oi, L.q + i * KP, L.S, VP, K, false);
    delta_rows<VP>(oi, L.pm + i * C, L.u, VP, i + 1, true);
    delta_store<Cfg::kElem>(p.o, s, i0 + i, h, oi, p.dv_);
  }
  const i64 last = n - 1;
  float m[C];
  for (i64 j = 0; j < n; ++j) m[j] = delta_chunk_mask(L, last, j);
  const float el = L.e[last];
  // kt scaled by M_last,j: the coefficients of the state's update.
  for (int r = 0; r < K; ++r)
    for (i64 j = 0; j < n; ++j) L.kt[r * C + j] *= m[j];
  for (int r = 0; r < K; ++r)
    for (int c = 0; c < VP; c += kVecWidth) vstore(L.S + r * VP + c, el * vload(L.S + r * VP + c));
  delta_rows_m<VP>(L.S, VP, L.kt, C, L.u, VP, n, K, true);
}

template <class Cfg> EJK_HD void delta_chunk_unit(const DeltaParams& p, i64 s, i64 h, float* lane) {
  DeltaChunkLane<Cfg> L(lane);
  constexpr int VP = DeltaChunkLane<Cfg>::VP;
  delta_load_state<Cfg, VP>(L.S, p, p.h0, s, h, 0, p.dv_);
  for (i64 i0 = 0; i0 < p.seqlen; i0 += kDeltaChunk) {
    const i64 n = min_of((i64)kDeltaChunk, p.seqlen - i0);
    delta_chunk_load<Cfg>(p, L, s, h, i0, n);
    delta_chunk_gram<Cfg>(L, n);
    delta_chunk_solve<Cfg>(L, n);
    delta_chunk_state<Cfg>(p, L, s, h, i0, n);
  }
  delta_store_state<Cfg, VP>(p.ht, p, L.S, s, h, 0, p.dv_);
}

template <class Cfg> void delta_chunk_tasks(const DeltaParams& p, long long task_begin, long long task_end) {
  for (long long t = task_begin; t < task_end; ++t) {
    float* lane = p.work + t * delta_cpu_chunk_lane_floats(Cfg::kK, Cfg::kV);
    for (i64 w = t; w < p.sequences * p.heads; w += p.lanes) delta_chunk_unit<Cfg>(p, w / p.heads, w % p.heads, lane);
  }
}

}  // namespace ejk::cpu
