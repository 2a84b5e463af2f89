// CUDA gated delta rule, forward, in the chunked WY form on mma.sync tensor cores (semantics:
// common/delta_params.h; the passes and their reasons: docs/design/delta_chunked.md).
//
// Per chunk of C = 64 tokens, with G the cumulative clamped log decay since the chunk's start
// or its last segment start, r the segment index inside the chunk, e_i = exp(G_i) where token i
// still sees the incoming state (r_i = 0, else 0) and M_ij = exp(G_i - G_j) [r_i = r_j]:
//     A = strictly lower (beta_i k_i.k_j M_ij),  T = (I + A)^-1 (forward substitution),
//     W = T (beta e k),  U = T (beta v)
//     V' = U - W S,  o = (e q) S + lower-inclusive(q k^T M) V',
//     S = e_last S + (k exp(G_last - G) [r = r_last])^T V'.
// Phase 0 (a block per sequence, head and chunk) computes everything that does not depend on
// S into the workspace (DeltaChunkWork); phase 1 (a block per sequence, head and 32 state
// columns) walks the chunks with S in registers.
#pragma once
#include "ejk/kernels/common/delta_params.h"
#include "ejk/kernels/cuda/delta.cuh"
#include "ejk/kernels/cuda/mma_frag.cuh"
#include "ejk/kernels/cuda/ptx.cuh"

namespace ejk::cuda {

constexpr int kDC = kDeltaChunk;       // tokens per chunk
constexpr int kDN = kDeltaChunkCols;   // state columns per walking block
constexpr int kDCP = int(delta_chunk_pitch(kDC)), kDNP = int(delta_chunk_pitch(kDN));

// The (row, column) of C fragment element e (0..3) of the m16n8 tile at (m0, n0).
__device__ __forceinline__ int dc_row(int m0, int e) { return m0 + (threadIdx.x % 32) / 4 + (e >= 2) * 8; }
__device__ __forceinline__ int dc_col(int n0, int e) { return n0 + (threadIdx.x % 4) * 2 + (e & 1); }

template <Elem E> __device__ __forceinline__ float dc_f32(u16 x) { return to_f32<E>(x); }

// Cfg: E (bf16 or f16), kK, kV.
template <class Cfg> struct DeltaPrepSmem {
  static constexpr int PK = int(delta_chunk_pitch(Cfg::kK)), PV = int(delta_chunk_pitch(Cfg::kV));
  u16 q[kDC][PK], k[kDC][PK], v[kDC][PV];  // the chunk's raw rows (zeros past T)
  u16 tk[kDC][kDCP], tv[kDC][kDCP];        // T with its columns scaled for W and for U
  float a[kDC][kDC + 4];                   // the strictly lower system (rows of float4s)
  float beta[kDC], lg[kDC], g[kDC], qn[kDC], kn[kDC], e[kDC], fc[kDC];
  int r[kDC];  // first a segment start flag, then the segment index inside the chunk
};

// Copies rows [t0, t0 + 64) of a token tensor (zeros past n) into [64][ld] shared rows.
template <int X>
__device__ __forceinline__ void dc_load_rows(u16 (*dst)[delta_chunk_pitch(X)], const DeltaTokens& x, i64 s, i64 t0,
                                             i64 h, int n) {
  const u16* src = static_cast<const u16*>(x.data);
  for (int idx = threadIdx.x; idx < kDC * X; idx += kDeltaThreads) {
    const int i = idx / X, d = idx % X;
    dst[i][d] = i < n ? src[delta_at(x, s, t0 + i, h) + d] : u16(0);
  }
}

// Per token: beta, the clamped log decay and the segment start flag; then the norms.
template <class Cfg>
__device__ __forceinline__ void dc_token_values(const DeltaParams& p, DeltaPrepSmem<Cfg>& sm, i64 s, i64 t0, i64 h,
                                                int n) {
  constexpr Elem E = Cfg::E;
  const int i = threadIdx.x;
  if (i < kDC) {
    const i64 t = t0 + i;
    bool live;
    const float g = i < n && p.decay.data ? delta_read<E>(p.decay.data, delta_at(p.decay, s, t, h)) : 0.0f;
    sm.beta[i] = i < n ? delta_read<E>(p.beta.data, delta_at(p.beta, s, t, h)) : 0.0f;
    sm.lg[i] = delta_log_decay(g, &live);
    sm.r[i] = i < n && delta_resets(p, s, t) ? 1 : 0;
  }
}

template <class Cfg> __device__ __forceinline__ void dc_norms(const DeltaParams& p, DeltaPrepSmem<Cfg>& sm) {
  constexpr Elem E = Cfg::E;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = warp; i < kDC; i += kDeltaWarps) {
    float sq = 0.0f, sk = 0.0f;
    for (int d = lane; d < Cfg::kK; d += 32) {
      const float x = dc_f32<E>(sm.q[i][d]), y = dc_f32<E>(sm.k[i][d]);
      sq += x * x, sk += y * y;
    }
    sq = delta_warp_sum(sq), sk = delta_warp_sum(sk);
    if (lane == 0) {
      sm.qn[i] = (p.l2norm ? rsqrtf(sq + kDeltaNormEps) : 1.0f) * p.scale;
      sm.kn[i] = p.l2norm ? rsqrtf(sk + kDeltaNormEps) : 1.0f;
    }
  }
}

// Thread 0: G and the segment index (a segment start restarts G at 0: its decay multiplies a
// zero state). Tokens past T add nothing, so the last row's values are the last token's.
template <class Cfg> __device__ __forceinline__ void dc_scan(DeltaPrepSmem<Cfg>& sm) {
  if (threadIdx.x != 0) return;
  float g = 0.0f;
  int r = 0;
  for (int i = 0; i < kDC; ++i) {
    if (sm.r[i]) r += 1, g = 0.0f;
    else g += sm.lg[i];
    sm.g[i] = g, sm.r[i] = r;
  }
}

// The 64 x 64 products k k^T and q k^T on the raw rows, masked and scaled into A (shared) and
// P (the workspace). Warp w: m-tile w % 4, n-tiles 4 (w / 4) .. 4 (w / 4) + 3.
template <class Cfg>
__device__ __forceinline__ void dc_gram(DeltaPrepSmem<Cfg>& sm, u16* pm) {
  constexpr Elem E = Cfg::E;
  constexpr int PK = DeltaPrepSmem<Cfg>::PK;
  const int warp = threadIdx.x / 32, m0 = 16 * (warp & 3), nb = 32 * (warp >> 2);
  float ak[4][4] = {}, aq[4][4] = {};
#pragma unroll
  for (int k0 = 0; k0 < Cfg::kK; k0 += 16) {
    u32 fk[4], fq[4];
    frag_a(fk, &sm.k[0][0], PK, m0, k0);
    frag_a(fq, &sm.q[0][0], PK, m0, k0);
#pragma unroll
    for (int np = 0; np < 2; ++np) {
      u32 b[4];
      frag_b_nk(b, &sm.k[0][0], PK, nb + 16 * np, k0);
      mma_16816<E>(ak[2 * np], fk, b[0], b[1]);
      mma_16816<E>(ak[2 * np + 1], fk, b[2], b[3]);
      mma_16816<E>(aq[2 * np], fq, b[0], b[1]);
      mma_16816<E>(aq[2 * np + 1], fq, b[2], b[3]);
    }
  }
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int e = 0; e < 4; e += 2) {
      float pv[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = dc_row(m0, e), j = dc_col(nb + 8 * nt, e + h);
        const bool same = sm.r[i] == sm.r[j] && j <= i;
        const float m = same ? expf(sm.g[i] - sm.g[j]) * sm.kn[j] : 0.0f;
        sm.a[i][j] = j < i ? sm.beta[i] * sm.kn[i] * m * ak[nt][e + h] : 0.0f;
        pv[h] = sm.qn[i] * m * aq[nt][e + h];
      }
      const int i = dc_row(m0, e), j = dc_col(nb + 8 * nt, e);
      *reinterpret_cast<u32*>(pm + i * kDC + j) = pack2<E>(pv[0], pv[1]);
    }
}

// Threads 0..63: column j of T = (I + A)^-1 by forward substitution, exact in f32; its entries
// scaled by column (beta e kn for W, beta for U) go to shared memory in the 16-bit type.
template <class Cfg> __device__ __forceinline__ void dc_solve(DeltaPrepSmem<Cfg>& sm) {
  const int j = threadIdx.x;
  if (j >= kDC) return;
  float x[kDC];
#pragma unroll
  for (int i = 0; i < kDC; ++i) {
    // Four partial sums over float4 rows: a quarter of the dependent chain, a quarter of the loads.
    float acc[4] = {i == j ? 1.0f : 0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int m = 0; m < i / 4 * 4; m += 4) {
      const float4 av = *reinterpret_cast<const float4*>(&sm.a[i][m]);
      acc[0] -= av.x * x[m], acc[1] -= av.y * x[m + 1], acc[2] -= av.z * x[m + 2], acc[3] -= av.w * x[m + 3];
    }
#pragma unroll
    for (int m = i / 4 * 4; m < i; ++m) acc[m % 4] -= sm.a[i][m] * x[m];
    x[i] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  }
  const float fw = sm.beta[j] * sm.e[j] * sm.kn[j], fu = sm.beta[j];
  constexpr Elem E = Cfg::E;
#pragma unroll
  for (int i = 0; i < kDC; ++i) {
    sm.tk[i][j] = u16(pack2<E>(x[i] * fw, 0.0f) & 0xffffu);
    sm.tv[i][j] = u16(pack2<E>(x[i] * fu, 0.0f) & 0xffffu);
  }
}

// out [64][X] (the workspace) = t [64][64] (shared) times x [64][X] raw rows (shared). Warp w:
// m-tile w % 4, columns (w / 4) X / 2 onward.
template <Elem E, int X>
__device__ __forceinline__ void dc_apply(const u16 (*t)[kDCP], const u16 (*x)[delta_chunk_pitch(X)], u16* out) {
  constexpr int NT = X / 16;  // n-tiles per warp
  const int warp = threadIdx.x / 32, m0 = 16 * (warp & 3), nb = (warp >> 2) * (X / 2);
  float acc[NT][4] = {};
#pragma unroll
  for (int k0 = 0; k0 < kDC; k0 += 16) {
    u32 a[4];
    frag_a(a, &t[0][0], kDCP, m0, k0);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      u32 b[4];
      frag_b_kn(b, &x[0][0], int(delta_chunk_pitch(X)), k0, nb + 16 * np);
      mma_16816<E>(acc[2 * np], a, b[0], b[1]);
      mma_16816<E>(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; e += 2) {
      const int i = dc_row(m0, e), j = dc_col(nb + 8 * nt, e);
      *reinterpret_cast<u32*>(out + i * X + j) = pack2<E>(acc[nt][e], acc[nt][e + 1]);
    }
}

// Phase 0: one block per unit (sequence, head, chunk), the unit index blockIdx.x.
template <class Cfg> __device__ void delta_chunk_prep(const DeltaParams& p, const DeltaChunkWork& w) {
  static_assert(sizeof(DeltaPrepSmem<Cfg>) == delta_chunk_prep_smem(Cfg::kK, Cfg::kV));
  static_assert(Cfg::kK % 32 == 0 && Cfg::kV % 32 == 0 && Cfg::kK <= 128, "16 x 32 tiles, K up to 128");
  extern __shared__ __align__(16) unsigned char dc_smem[];
  auto& sm = *reinterpret_cast<DeltaPrepSmem<Cfg>*>(dc_smem);
  constexpr int K = Cfg::kK, V = Cfg::kV;
  constexpr Elem E = Cfg::E;
  const i64 unit = blockIdx.x, c = unit % p.chunks, h = unit / p.chunks % p.heads, s = unit / (p.chunks * p.heads);
  const i64 t0 = c * kDC;
  const int n = int(min_of(i64(kDC), p.seqlen - t0));
  dc_load_rows<K>(sm.q, p.q, s, t0, h, n);
  dc_load_rows<K>(sm.k, p.k, s, t0, h, n);
  dc_load_rows<V>(sm.v, p.v, s, t0, h, n);
  dc_token_values<Cfg>(p, sm, s, t0, h, n);
  __syncthreads();
  dc_scan<Cfg>(sm);
  dc_norms<Cfg>(p, sm);
  __syncthreads();
  if (threadIdx.x < kDC) {
    const int i = threadIdx.x;
    sm.e[i] = sm.r[i] == 0 ? expf(sm.g[i]) : 0.0f;
    sm.fc[i] = sm.r[i] == sm.r[kDC - 1] ? expf(sm.g[kDC - 1] - sm.g[i]) * sm.kn[i] : 0.0f;
  }
  u16* pm = w.pm + unit * kDC * kDC;
  dc_gram<Cfg>(sm, pm);
  __syncthreads();
  if (threadIdx.x == 0) w.gc[unit] = sm.e[kDC - 1];
  dc_solve<Cfg>(sm);
  // q and k scaled per token (q: its norm, the scale and e; k: its norm and the decay to the
  // chunk's end), two elements a thread.
  u16 *qg = w.qg + unit * kDC * K, *kd = w.kd + unit * kDC * K;
  for (int idx = threadIdx.x; idx < kDC * K / 2; idx += kDeltaThreads) {
    const int i = idx / (K / 2), d = 2 * (idx % (K / 2));
    const float fq = sm.qn[i] * sm.e[i], fk = sm.fc[i];
    *reinterpret_cast<u32*>(qg + i * K + d) = pack2<E>(dc_f32<E>(sm.q[i][d]) * fq, dc_f32<E>(sm.q[i][d + 1]) * fq);
    *reinterpret_cast<u32*>(kd + i * K + d) = pack2<E>(dc_f32<E>(sm.k[i][d]) * fk, dc_f32<E>(sm.k[i][d + 1]) * fk);
  }
  __syncthreads();
  dc_apply<E, K>(sm.tk, sm.k, w.w + unit * kDC * K);
  dc_apply<E, V>(sm.tv, sm.v, w.u + unit * kDC * V);
}

template <class Cfg> struct DeltaWalkSmem {
  static constexpr int PK = int(delta_chunk_pitch(Cfg::kK));
  struct Stage {
    u16 w[kDC][PK], qg[kDC][PK], kd[kDC][PK];
    u16 pm[kDC][kDCP], u[kDC][kDNP];
  } st[2];
  u16 sb[Cfg::kK][kDNP];  // the state tile in the 16-bit type: B of W S and (e q) S
  u16 vp[kDC][kDNP];      // V' in the 16-bit type: B of P V' and of the state update
};

// Stages chunk c's operands for the column tile at c0 (16-byte cp.async copies).
template <class Cfg>
__device__ __forceinline__ void dc_stage(typename DeltaWalkSmem<Cfg>::Stage& st, const DeltaChunkWork& w, i64 unit,
                                         i64 c0, i64 V) {
  constexpr int K = Cfg::kK, KQ = K / 8;
  const u16 *gw = w.w + unit * kDC * K, *gq = w.qg + unit * kDC * K, *gk = w.kd + unit * kDC * K;
  for (int idx = threadIdx.x; idx < kDC * KQ; idx += kDeltaThreads) {
    const int i = idx / KQ, d = 8 * (idx % KQ);
    cp_async_16(smem_addr(&st.w[i][d]), gw + i * K + d, true);
    cp_async_16(smem_addr(&st.qg[i][d]), gq + i * K + d, true);
    cp_async_16(smem_addr(&st.kd[i][d]), gk + i * K + d, true);
  }
  const u16 *gp = w.pm + unit * kDC * kDC, *gu = w.u + unit * kDC * V + c0;
  for (int idx = threadIdx.x; idx < kDC * (kDC / 8 + kDN / 8); idx += kDeltaThreads) {
    const int i = idx / (kDC / 8 + kDN / 8), q = idx % (kDC / 8 + kDN / 8);
    if (q < kDC / 8) cp_async_16(smem_addr(&st.pm[i][8 * q]), gp + i * kDC + 8 * q, true);
    else cp_async_16(smem_addr(&st.u[i][8 * (q - kDC / 8)]), gu + i * V + 8 * (q - kDC / 8), true);
  }
  cp_async_commit();
}

// The state tile's C fragments a warp holds: m-tile ms, n-tiles ns0 .. ns0 + kNS - 1.
template <class Cfg> struct DeltaWalkTiles {
  static constexpr int kMS = Cfg::kK / 16, kSplit = kDeltaWarps / kMS, kNS = kDN / 8 / kSplit;
  static_assert(kDeltaWarps % kMS == 0 && kNS % 2 == 0, "K of 64 or 128");
  __device__ static int ms() { return threadIdx.x / 32 / kSplit; }
  __device__ static int ns0() { return threadIdx.x / 32 % kSplit * kNS; }
};

template <class Cfg> __device__ __forceinline__ void dc_store_state(u16 (*sb)[kDNP], const float (*S)[4]) {
  using Tl = DeltaWalkTiles<Cfg>;
#pragma unroll
  for (int nt = 0; nt < Tl::kNS; ++nt)
#pragma unroll
    for (int e = 0; e < 4; e += 2) {
      const int r = dc_row(16 * Tl::ms(), e), c = dc_col(8 * (Tl::ns0() + nt), e);
      *reinterpret_cast<u32*>(&sb[r][c]) = pack2<Cfg::E>(S[nt][e], S[nt][e + 1]);
    }
}

// V' = U - W S into vp, and o's first term (e q) S into acc. Warp w: m-tile w % 4, n-tiles
// 2 (w / 4) and 2 (w / 4) + 1.
template <class Cfg>
__device__ __forceinline__ void dc_walk_vprime(DeltaWalkSmem<Cfg>& sm, const typename DeltaWalkSmem<Cfg>::Stage& st,
                                               float (&acc)[2][4]) {
  constexpr Elem E = Cfg::E;
  constexpr int PK = DeltaWalkSmem<Cfg>::PK;
  const int warp = threadIdx.x / 32, m0 = 16 * (warp & 3), nb = 16 * (warp >> 2);
  float ws[2][4] = {};
#pragma unroll
  for (int k0 = 0; k0 < Cfg::kK; k0 += 16) {
    u32 aw[4], aq[4], b[4];
    frag_a(aw, &st.w[0][0], PK, m0, k0);
    frag_a(aq, &st.qg[0][0], PK, m0, k0);
    frag_b_kn(b, &sm.sb[0][0], kDNP, k0, nb);
    mma_16816<E>(ws[0], aw, b[0], b[1]);
    mma_16816<E>(ws[1], aw, b[2], b[3]);
    mma_16816<E>(acc[0], aq, b[0], b[1]);
    mma_16816<E>(acc[1], aq, b[2], b[3]);
  }
#pragma unroll
  for (int nt = 0; nt < 2; ++nt)
#pragma unroll
    for (int e = 0; e < 4; e += 2) {
      const int i = dc_row(m0, e), j = dc_col(nb + 8 * nt, e);
      const float v0 = dc_f32<E>(st.u[i][j]) - ws[nt][e], v1 = dc_f32<E>(st.u[i][j + 1]) - ws[nt][e + 1];
      *reinterpret_cast<u32*>(&sm.vp[i][j]) = pack2<E>(v0, v1);
    }
}

// o = acc + P V' for the chunk's rows [t0, t0 + n), columns c0 ..
template <class Cfg>
__device__ __forceinline__ void dc_walk_out(const DeltaParams& p, DeltaWalkSmem<Cfg>& sm,
                                            const typename DeltaWalkSmem<Cfg>::Stage& st, float (&acc)[2][4], i64 s,
                                            i64 h, i64 t0, int n, i64 c0) {
  constexpr Elem E = Cfg::E;
  const int warp = threadIdx.x / 32, m0 = 16 * (warp & 3), nb = 16 * (warp >> 2);
#pragma unroll
  for (int k0 = 0; k0 < kDC; k0 += 16) {
    u32 a[4], b[4];
    frag_a(a, &st.pm[0][0], kDCP, m0, k0);
    frag_b_kn(b, &sm.vp[0][0], kDNP, k0, nb);
    mma_16816<E>(acc[0], a, b[0], b[1]);
    mma_16816<E>(acc[1], a, b[2], b[3]);
  }
#pragma unroll
  for (int nt = 0; nt < 2; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = dc_row(m0, e), j = dc_col(nb + 8 * nt, e);
      if (i < n) delta_write<E>(p.o.data, delta_at(p.o, s, t0 + i, h) + c0 + j, acc[nt][e]);
    }
}

// S = e_last S + Kd^T V' on the warp's state fragments.
template <class Cfg>
__device__ __forceinline__ void dc_walk_state(DeltaWalkSmem<Cfg>& sm, const typename DeltaWalkSmem<Cfg>::Stage& st,
                                              float (*S)[4], float gc) {
  using Tl = DeltaWalkTiles<Cfg>;
  constexpr int PK = DeltaWalkSmem<Cfg>::PK;
#pragma unroll
  for (int nt = 0; nt < Tl::kNS; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) S[nt][e] *= gc;
#pragma unroll
  for (int k0 = 0; k0 < kDC; k0 += 16) {
    u32 a[4];
    frag_a_t(a, &st.kd[0][0], PK, 16 * Tl::ms(), k0);
#pragma unroll
    for (int np = 0; np < Tl::kNS / 2; ++np) {
      u32 b[4];
      frag_b_kn(b, &sm.vp[0][0], kDNP, k0, 8 * Tl::ns0() + 16 * np);
      mma_16816<Cfg::E>(S[2 * np], a, b[0], b[1]);
      mma_16816<Cfg::E>(S[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// Phase 1: one block per (sequence, head, tile of 32 state columns), the tile fastest.
template <class Cfg> __device__ void delta_chunk_walk(const DeltaParams& p, const DeltaChunkWork& w) {
  static_assert(sizeof(DeltaWalkSmem<Cfg>) == delta_chunk_walk_smem(Cfg::kK));
  using Tl = DeltaWalkTiles<Cfg>;
  extern __shared__ __align__(16) unsigned char dc_smem[];
  auto& sm = *reinterpret_cast<DeltaWalkSmem<Cfg>*>(dc_smem);
  const i64 tiles = p.dv_ / kDN, tile = blockIdx.x % tiles, h = blockIdx.x / tiles % p.heads;
  const i64 s = blockIdx.x / (tiles * p.heads), c0 = tile * kDN;
  const i64 first = (s * p.heads + h) * p.chunks;  // the unit of chunk 0
  float S[Tl::kNS][4];
  const i64 base = delta_state_at(p, s, h) + c0;
#pragma unroll
  for (int nt = 0; nt < Tl::kNS; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = dc_row(16 * Tl::ms(), e), c = dc_col(8 * (Tl::ns0() + nt), e);
      S[nt][e] = p.h0 != nullptr ? p.h0[base + r * p.dv_ + c] : 0.0f;
    }
  dc_store_state<Cfg>(sm.sb, S);
  if (p.chunks > 0) dc_stage<Cfg>(sm.st[0], w, first, c0, p.dv_);
  for (i64 c = 0; c < p.chunks; ++c) {
    const auto& st = sm.st[c & 1];
    const float gc = w.gc[first + c];
    cp_async_wait<0>();
    __syncthreads();  // chunk c staged, the state stored; every read of the other stage done
    if (c + 1 < p.chunks) dc_stage<Cfg>(sm.st[(c + 1) & 1], w, first + c + 1, c0, p.dv_);
    float acc[2][4] = {};
    dc_walk_vprime<Cfg>(sm, st, acc);
    __syncthreads();  // V' complete; nobody reads the stored state any more this chunk
    const i64 t0 = c * kDC;
    dc_walk_out<Cfg>(p, sm, st, acc, s, h, t0, int(min_of(i64(kDC), p.seqlen - t0)), c0);
    dc_walk_state<Cfg>(sm, st, S, gc);
    dc_store_state<Cfg>(sm.sb, S);
  }
  if (p.ht == nullptr) return;
#pragma unroll
  for (int nt = 0; nt < Tl::kNS; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = dc_row(16 * Tl::ms(), e), c = dc_col(8 * (Tl::ns0() + nt), e);
      p.ht[base + r * p.dv_ + c] = S[nt][e];
    }
}

template <class Cfg> __device__ void delta_chunk_fwd(const DeltaParams& p) {
  const DeltaChunkWork w = delta_chunk_work(p.work, p.sequences * p.heads * p.chunks, Cfg::kK, Cfg::kV);
  if (p.phase == 0) delta_chunk_prep<Cfg>(p, w);
  else delta_chunk_walk<Cfg>(p, w);
}

// The variant's entry: Cfg::kChunk picks the kernel (in a template, so the other one, e.g. the
// chunked form of an f32 key, is never instantiated).
template <class Cfg> __device__ void delta_fwd_variant(const DeltaParams& p) {
  if constexpr (Cfg::kChunk == 1) delta_fwd<Cfg>(p);
  else delta_chunk_fwd<Cfg>(p);
}

}  // namespace ejk::cuda
