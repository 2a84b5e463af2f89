// The sm_90a flash forward's per-tile steps of a consumer warpgroup (flash_fwd_sm90.cuh runs
// them in its tile loop): issuing S = Q K^T (Q from shared memory or from registers) and
// O += P V as wgmma groups, the online softmax of an S tile with its lagged reference max, P's
// packing into the P V A fragments and O's rescale. C is the block's FlashFwdSm90Config.
#pragma once
#include "ejk/kernels/cuda/flash_fwd_tile.cuh"
#include "ejk/kernels/cuda/sm90/epilogue.cuh"
#include "ejk/kernels/cuda/wgmma.cuh"

namespace ejk::cuda {

// Byte offset of 16-byte chunk c (along D) of row r in a swizzled tile of `rows` rows.
// (sm90/epilogue.cuh's layout; C only for the callers' spelling.)
template <class C> __device__ __forceinline__ u32 sw128_offset(int r, int c, int rows) {
  return sm90::sw128_offset(r, c, rows);
}

// Pins accumulator registers after a wgmma wait: without it the compiler may read them
// before the wait (the asm that wrote them "finished" at issue as far as it knows).
template <int N> __device__ __forceinline__ void fence_operands(float* d) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The descriptor of k step kk (16 elements along head_dim) of a K-major swizzled tile of `rows`
// rows: column block kk / 4, 32 bytes per step inside the 128-byte row.
__device__ __forceinline__ u64 k_major_step(u64 desc, int kk, int rows) {
  return smem_desc_advance(desc, u32((kk / 4) * rows * 128 + (kk % 4) * 32));
}

// A GEMM's K k steps (at most 16: head_dim and block_k <= 256) are issued as groups of eight,
// then of four, as one asm statement each, and the rest (head_dim or block_k no multiple of 4
// steps) one by one: NVVM and ptxas spend their time per statement, not per instruction
// (docs/design/flash_fwd_cuda.md, "The tile loop"). Blocks of three consumer warpgroups (160
// registers each) issue every step alone: grouped, their kernels ran slower; the others ran as
// fast as with single steps (the doc's "Measured choices of the sm90a kernels").
template <class C, int K> struct KSteps {
  static_assert(K >= 1 && K <= 16, "flash_fwd sm90: 1 to 16 k steps per GEMM");
  static constexpr bool kGrouped = C::kConsumers <= 2;
  static constexpr int kGroups8 = kGrouped ? K / 8 : 0, kGroups4 = kGrouped ? K % 8 / 4 : 0;
  static constexpr int kFirstSingle = kGrouped ? K / 4 * 4 : 0;
};

// Issues S = Q K^T for the warpgroup's 64 rows (zeroed first): kQkSteps wgmmas (head_dim / 16;
// a padded tile's zero columns add nothing), both operands K-major in shared memory. The
// caller fences before and commits/waits after.
template <class C>
__device__ __forceinline__ void qk_issue(float (&s)[1][C::kNTiles][4], u32 sQ_wg, u32 sK) {
  using W = WgmmaSs<C::kBlockK, C::kElem>;
  using K = KSteps<C, C::kQkSteps>;
  const u64 a0 = smem_desc_sw128(sQ_wg, 16, 1024), b0 = smem_desc_sw128(sK, 16, 1024);
  constexpr int kQ = C::kBlockQ, kK = C::kBlockK, k4 = 8 * K::kGroups8;
  float* d = &s[0][0][0];
  if constexpr (K::kGroups8 >= 1)
    W::run8(d, k_major_step(a0, 0, kQ), k_major_step(a0, 4, kQ), k_major_step(b0, 0, kK),
            k_major_step(b0, 4, kK));
  if constexpr (K::kGroups8 >= 2)
    W::run8(d, k_major_step(a0, 8, kQ), k_major_step(a0, 12, kQ), k_major_step(b0, 8, kK),
            k_major_step(b0, 12, kK));
  if constexpr (K::kGroups4 > 0) W::run4(d, k_major_step(a0, k4, kQ), k_major_step(b0, k4, kK));
#pragma unroll
  for (int kk = K::kFirstSingle; kk < C::kQkSteps; ++kk)
    W::run1(d, k_major_step(a0, kk, kQ), k_major_step(b0, kk, kK));
}

// Loads the warp's 16 rows of the Q tile as wgmma A fragments (the mma A layout: a[kk] holds
// rows g, g + 8 at columns 16 kk + 2 t, + 8; g = lane / 4, t = lane % 4): one ldmatrix.x4 per
// k step, lane L addressing row (L & 7) + 8 ((L >> 3) & 1) of chunk 2 kk + L / 16, through the
// tile's 128-byte swizzle.
template <class C>
__device__ __forceinline__ void load_q_fragments(u32 (&qf)[C::kQFragSteps][4], u32 sQ,
                                                 int warp_row0, int lane) {
  const int r = warp_row0 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
  for (int kk = 0; kk < C::kQFragSteps; ++kk)
    ldmatrix_x4(qf[kk], sQ + sw128_offset<C>(r, 2 * kk + (lane >> 4), C::kBlockQ));
}

// S = Q K^T with Q's fragments in registers: only K is read from shared memory.
template <class C>
__device__ __forceinline__ void qk_issue_rs(float (&s)[1][C::kNTiles][4],
                                            const u32 (&qf)[C::kQFragSteps][4], u32 sK) {
  using W = WgmmaRs<C::kBlockK, C::kElem>;
  using K = KSteps<C, C::kQkSteps>;
  const u64 b0 = smem_desc_sw128(sK, 16, 1024);
  constexpr int kK = C::kBlockK, k4 = 8 * K::kGroups8;
  float* d = &s[0][0][0];
  if constexpr (K::kGroups8 >= 1)
    W::template run8<false, 0>(d, qf, k_major_step(b0, 0, kK), k_major_step(b0, 4, kK));
  if constexpr (K::kGroups8 >= 2)
    W::template run8<false, 8>(d, qf, k_major_step(b0, 8, kK), k_major_step(b0, 12, kK));
  if constexpr (K::kGroups4 > 0) W::template run4<false, k4>(d, qf, k_major_step(b0, k4, kK));
#pragma unroll
  for (int kk = K::kFirstSingle; kk < C::kQkSteps; ++kk)
    W::template run1<false>(d, qf[kk], k_major_step(b0, kk, kK));
}

template <int N> __device__ __forceinline__ void zero(float (&x)[1][N][4]) {
#pragma unroll
  for (int t = 0; t < N; ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i) x[0][t][i] = 0.f;
}

// Where a consumer warp's staged bias comes from (C::kBiasStaged): its rows' box coordinates
// in the bias map (flash_fwd_bias_view: row, head, sequence; 0 on a broadcast axis) and the
// bytes one tile's boxes count on the warp's barrier.
struct Sm90BiasSource {
  int row, head, seq;
  u32 bytes;
};

template <class C>
__device__ __forceinline__ Sm90BiasSource sm90_bias_source(const FlashFwdParams& p,
                                                           const SeqSpan& seq, i64 h, i64 row0) {
  const bool rows_bcast = p.bias_stride_q == 0;  // 1-row boxes
  constexpr u32 kBox = u32(FlashFwdSm90Geometry::kBiasBoxBytes);
  return {rows_bcast ? 0 : int(row0), p.bias_stride_h != 0 ? int(h) : 0,
          p.bias_stride_b != 0 ? int(seq.index) : 0,
          u32(C::kBiasBoxes) * (rows_bcast ? kBox / u32(FlashFwdSm90Geometry::kBiasBoxRows) : kBox)};
}

// A consumer warp's bias of its 16 rows at keys k0 .. k0 + block_k - 1 into its boxes at `rows`
// (C::kBiasStaged): lane 0 issues one TMA copy per 64 keys, completing on the warp's barrier
// `bar`; the warp waits there a tile later. Keys past the tensor arrive as zeros (those past
// len_k are masked); rows past the sequence's are never stored. Each tile's bias is read once:
// evicted from L2 first.
template <class C>
__device__ __forceinline__ void sm90_stage_bias(const FlashFwdTensorMaps& maps,
                                                const Sm90BiasSource& src, u32 rows, u32 bar,
                                                i64 k0, int lane) {
  if (lane != 0) return;
  mbar_arrive_expect_tx(bar, src.bytes);
  const u64 policy = l2_evict_first_policy();
#pragma unroll
  for (int c = 0; c < C::kBiasBoxes; ++c)
    tma_load_4d_hint(rows + c * u32(FlashFwdSm90Geometry::kBiasBoxBytes), &maps.bias, bar,
                     int(k0) + c * int(FlashFwdSm90Geometry::kTmaBoxCols), src.row, src.head,
                     src.seq, policy);
}

// P (probabilities in S fragments) packed to the 16-bit A fragments of the P V wgmmas.
template <class C>
__device__ __forceinline__ void pack_p(u32 (&a)[C::kBlockK / 16][4], const float (&s)[1][C::kNTiles][4]) {
#pragma unroll
  for (int kk = 0; kk < C::kBlockK / 16; ++kk) {
    a[kk][0] = pack2<C::kElem>(s[0][2 * kk][0], s[0][2 * kk][1]);
    a[kk][1] = pack2<C::kElem>(s[0][2 * kk][2], s[0][2 * kk][3]);
    a[kk][2] = pack2<C::kElem>(s[0][2 * kk + 1][0], s[0][2 * kk + 1][1]);
    a[kk][3] = pack2<C::kElem>(s[0][2 * kk + 1][2], s[0][2 * kk + 1][3]);
  }
}

// Issues O += P V: P from registers (packed before the caller's fence: registers a wgmma
// reads must not be written between the fence and the wgmma), V MN-major in shared memory.
template <class C>
__device__ __forceinline__ void pv_issue(float (&o)[1][C::kDTiles][4],
                                         const u32 (&a)[C::kBlockK / 16][4], u32 sV) {
  // 64-column blocks LBO apart, 8-row groups SBO 1024 B apart.
  using W = WgmmaRs<C::kDataDim, C::kElem>;
  using K = KSteps<C, C::kBlockK / 16>;
  const u64 b0 = smem_desc_sw128(sV, C::kBlockK * 128, 1024);
  constexpr int k4 = 8 * K::kGroups8;
  constexpr u32 kRows16 = 16 * 128;  // keys 16 kk .. 16 kk + 15: 16 rows of V further
  float* d = &o[0][0][0];
  if constexpr (K::kGroups8 >= 1)
    W::template run8<true, 0>(d, a, b0, smem_desc_advance(b0, 4 * kRows16));
  if constexpr (K::kGroups8 >= 2)
    W::template run8<true, 8>(d, a, smem_desc_advance(b0, 8 * kRows16),
                              smem_desc_advance(b0, 12 * kRows16));
  if constexpr (K::kGroups4 > 0) W::template run4<true, k4>(d, a, smem_desc_advance(b0, k4 * kRows16));
#pragma unroll
  for (int kk = K::kFirstSingle; kk < C::kBlockK / 16; ++kk)
    W::template run1<true>(d, a[kk], smem_desc_advance(b0, kk * kRows16));
}

// Online softmax of a new S tile without touching O: returns each row's rescale factor, which
// the caller applies to O once the P V wgmma still accumulating into it has finished.
// s holds x / exp_scale for log2 logits x (exp_scale > 0: raw dot products with the scale
// folded in, or 1): the max is taken on s and scaled once per row, and each score costs one
// FFMA and one ex2. Masked entries are -inf either way.
// The reference max m moves only when a tile's max exceeds it by more than kMaxLag (log2
// units; FlashAttention-4's rule): probabilities are then <= 2^kMaxLag (exact in fp32, and
// bf16 / f16 keep their relative precision up to 256), the sums stay exact relative to m,
// finish_rows moves them to the true max, and O needs rescaling only in the few tiles where m
// moved, so rescale_o skips it in the others.
inline constexpr float kMaxLag = 8.f;

template <class C>
__device__ __forceinline__ void softmax_deferred(float (&s)[1][C::kNTiles][4],
                                                 RowState (&rows)[1][2], float (&alpha)[2],
                                                 float exp_scale) {
  // This lane's maxima of the two rows, in up to four FMNMX chains (the exponentials wait
  // for them; one linear chain of kNTiles was their latency).
  constexpr int kChains = C::kNTiles % 4 == 0 ? 4 : C::kNTiles % 2 == 0 ? 2 : 1;
  float mxs[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float part[kChains];
#pragma unroll
    for (int j = 0; j < kChains; ++j) part[j] = fmax_f32(s[0][j][2 * half], s[0][j][2 * half + 1]);
#pragma unroll
    for (int nt = kChains; nt < C::kNTiles; ++nt)
      part[nt % kChains] =
          fmax_f32(part[nt % kChains], fmax_f32(s[0][nt][2 * half], s[0][nt][2 * half + 1]));
#pragma unroll
    for (int w = kChains / 2; w > 0; w /= 2)
#pragma unroll
      for (int j = 0; j < w; ++j) part[j] = fmax_f32(part[j], part[j + w]);
    mxs[half] = part[0] * exp_scale;  // -inf stays -inf (exp_scale > 0)
  }
  // The quad's row max matters only where it raises the reference: when no lane of the warp
  // sees a score above m + kMaxLag (all but a row's first tiles), m stays and the two quad
  // reductions are skipped; r.top then holds this lane's maximum (quad_max'ed at the finish).
  // m stays the same in the four lanes of a row: it only ever moves to a quad-reduced max.
  const bool need = mxs[0] > rows[0][0].m + kMaxLag || mxs[1] > rows[0][1].m + kMaxLag;
  if (__any_sync(0xffffffffu, need)) {
    mxs[0] = quad_max(mxs[0]);
    mxs[1] = quad_max(mxs[1]);
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float mx = mxs[half];
    RowState& r = rows[0][half];
    r.top = fmax_f32(r.top, mx);
    const bool raise = mx > r.m + kMaxLag;  // m = -inf: any visible key raises it
    const float m_new = raise ? mx : r.m;
    const float m_use = m_new == neg_inf_f32() ? 0.f : m_new;  // see online_softmax
    alpha[half] = raise ? fast_exp2(r.m - m_use) : 1.f;
    r.m = m_new;
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < C::kNTiles; ++nt)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const float pj = fast_exp2(fmaf(s[0][nt][2 * half + j], exp_scale, -m_use));
        s[0][nt][2 * half + j] = pj;
        sum += pj;
      }
    r.l = r.l * alpha[half] + sum;
  }
}

// Skipped (exactly: the factors are 1) when no row of the warp moved its reference max in this
// tile, which with the lag above is all but the first tiles of a row.
template <class C>
__device__ __forceinline__ void rescale_o(float (&o)[1][C::kDTiles][4], const float (&alpha)[2]) {
  if (!__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) return;
#pragma unroll
  for (int dt = 0; dt < C::kDTiles; ++dt)
#pragma unroll
    for (int i = 0; i < 4; ++i) o[0][dt][i] *= alpha[i / 2];
}

}  // namespace ejk::cuda
