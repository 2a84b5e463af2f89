// CPU mean pooling, forward and backward (semantics: common/mean_pooling_params.h). One task is
// (chunk of tokens, tile of columns), numbered chunk-major: task t is chunk t / col_tiles, tile
// t % col_tiles. Tasks run concurrently on the runtime's pool; the forward's sequences cut by
// chunk edges are finished by whichever task writes their last piece (an atomic count per
// sequence start), which adds the pieces in chunk order, so results do not depend on timing.
//
// Header only and freestanding (no standard headers): it is also JIT-compiled in-process.
#pragma once
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/mean_pooling_params.h"
#include "ejk/kernels/cpu/types.h"
#include "ejk/kernels/cpu/vec.h"

namespace ejk::cpu {

// Tokens summed apart before joining the running sum: a long piece then rounds like a few
// short ones (about sqrt(n / 64) + 64 additions deep instead of n).
inline constexpr i64 kMeanPoolBlock = 64;

// kVecWidth elements at p in f32. f16 takes the conversion instruction where the ISA has one
// (F16C, AVX-512F): GCC 12 turns a _Float16 vector conversion without AVX512-FP16 into one
// scalar conversion per element. Baseline x86-64 widens the bits with integer operations.
template <ElemKind K> EJK_HD vf mean_pool_load(const Elem<K>* p) {
  if constexpr (K != ElemKind::f16) {
    return load_f32<K>(p);
  } else {
#if defined(__AVX512F__)
    typedef short v16hi __attribute__((vector_size(32)));
    v16hi h;
    __builtin_memcpy(&h, p, sizeof h);
    return __builtin_ia32_vcvtph2ps512_mask(h, vf{}, (unsigned short)0xffff, /*current rounding*/ 4);
#elif defined(__F16C__)
    typedef short v8hi __attribute__((vector_size(16)));
    v8hi h;
    __builtin_memcpy(&h, p, sizeof h);
    return __builtin_ia32_vcvtph2ps256(h);
#else
    vu16 bits;
    __builtin_memcpy(&bits, p, sizeof bits);
    const vu h = __builtin_convertvector(bits, vu), magnitude = (h & 0x7fffu) << 13, exponent = h & 0x7c00u;
    const vu normal = magnitude + ((127u - 15u) << 23);                        // rebias the exponent
    const vu special = magnitude | 0x7f800000u;                                // inf and NaN
    const vu subnormal = __builtin_bit_cast(vu, __builtin_convertvector(h & 0x3ffu, vf) * 0x1p-24f);  // exact
    const vu body = exponent == 0x7c00u ? special : (exponent == 0u ? subnormal : normal);
    return __builtin_bit_cast(vf, body | ((h & 0x8000u) << 16));
#endif
  }
}

// acc[0, ncol) += the sum of rows x[0], x[stride], ... x[(n - 1) * stride] (n <= 4).
template <ElemKind K, int kN>
EJK_HD void mean_pool_add_rows(const Elem<K>* x, i64 stride, i64 ncol, float* acc) {
  i64 c = 0;
  for (; c + kVecWidth <= ncol; c += kVecWidth) {
    vf s = mean_pool_load<K>(x + c);
    if constexpr (kN == 4)
      s = (s + mean_pool_load<K>(x + stride + c)) +
          (mean_pool_load<K>(x + 2 * stride + c) + mean_pool_load<K>(x + 3 * stride + c));
    vstore(acc + c, vload(acc + c) + s);
  }
  for (; c < ncol; ++c) {
    float s = to_f32<K>(x[c]);
    if constexpr (kN == 4)
      s = (s + to_f32<K>(x[stride + c])) + (to_f32<K>(x[2 * stride + c]) + to_f32<K>(x[3 * stride + c]));
    acc[c] += s;
  }
}

// acc[0, ncol) = column sums of n tokens (stride elements apart) from x, in f32. Token by token,
// whole rows (memory is read in order; the sums stay in L1), four rows per pass over the sums.
template <ElemKind K>
EJK_HD void mean_pool_sum_tokens(const Elem<K>* x, i64 stride, i64 n, i64 ncol, float* acc) {
  float part[kMeanPoolMaxColTile];
  for (i64 c = 0; c < ncol; ++c) acc[c] = 0;
  for (i64 t0 = 0; t0 < n; t0 += kMeanPoolBlock) {
    const i64 t1 = min_of(n, t0 + kMeanPoolBlock);
    for (i64 c = 0; c < ncol; ++c) part[c] = 0;
    i64 t = t0;
    for (; t + 4 <= t1; t += 4) mean_pool_add_rows<K, 4>(x + t * stride, stride, ncol, part);
    for (; t < t1; ++t) mean_pool_add_rows<K, 1>(x + t * stride, stride, ncol, part);
    for (i64 c = 0; c < ncol; ++c) acc[c] += part[c];
  }
}

// dst[0, ncol) = src * scale, in the element type.
template <ElemKind K>
EJK_HD void mean_pool_store_scaled(Elem<K>* dst, const float* src, float scale, i64 ncol) {
  i64 c = 0;
  for (; c + kVecWidth <= ncol; c += kVecWidth) store_from_f32<K>(dst + c, vload(src + c) * scale);
  for (; c < ncol; ++c) dst[c] = from_f32<K>(src[c] * scale);
}

// Columns [col0, col0 + ncol) of the row of `rows` for sequence s.
template <ElemKind K> EJK_HD Elem<K>* mean_pool_row(const MeanPoolParams& p, i64 s, i64 col0) {
  return static_cast<Elem<K>*>(p.rows) + s * p.row_stride + col0;
}

// The task that writes a cut sequence's last piece sums all its pieces and writes its mean.
// The acquire-release count orders every other piece's stores before this task's reads.
template <ElemKind K>
EJK_HD void mean_pool_fwd_arrive(const MeanPoolParams& p, i64 s, const MeanPoolSpan& sp, i64 tile, i64 col0,
                                 i64 ncol, float* acc) {
  const i64 first = mean_pool_first_chunk(p, sp), pieces = mean_pool_last_chunk(p, sp) - first + 1;
  u32* count = p.arrivals + first * p.col_tiles + tile;
  if ((i64)__atomic_add_fetch(count, 1u, __ATOMIC_ACQ_REL) != pieces) return;
  for (i64 c = 0; c < ncol; ++c) acc[c] = 0;
  for (i64 k = 0; k < pieces; ++k) {
    const float* piece = mean_pool_piece(p, first, k) + col0;
    i64 c = 0;
    for (; c + kVecWidth <= ncol; c += kVecWidth) vstore(acc + c, vload(acc + c) + vload(piece + c));
    for (; c < ncol; ++c) acc[c] += piece[c];
  }
  mean_pool_store_scaled<K>(mean_pool_row<K>(p, s, col0), acc, mean_pool_scale<float>(sp.end - sp.begin), ncol);
}

// Forward task: the sums of the pieces in its chunk, for its columns. Templated on the variant's
// own Cfg (as the tasks below) so its lambda, too, has internal linkage.
template <class Cfg>
EJK_HD void mean_pool_fwd_task(const MeanPoolParams& p, i64 c, i64 tile) {
  constexpr ElemKind K = Cfg::kElem;
  const i64 col0 = tile * p.col_tile, ncol = min_of(p.col_tile, p.dim - col0);
  const MeanPoolSpan chunk = mean_pool_chunk(p, c);
  float acc[kMeanPoolMaxColTile];
  mean_pool_walk(p, chunk.begin, chunk.end, c == p.chunks - 1, [&](i64 s, const MeanPoolSpan& sp, i64 a, i64 e) {
    const Elem<K>* x = static_cast<const Elem<K>*>(p.tokens) + mean_pool_token(p, s, a) + col0;
    mean_pool_sum_tokens<K>(x, p.tok_stride_t, e - a, ncol, acc);
    if (sp.begin >= chunk.begin && sp.end <= chunk.end) {  // whole (or empty): its mean now
      mean_pool_store_scaled<K>(mean_pool_row<K>(p, s, col0), acc, mean_pool_scale<float>(sp.end - sp.begin), ncol);
      return;
    }
    float* slot = mean_pool_partial(p, c, sp.begin < chunk.begin ? 0 : 1) + col0;
    for (i64 j = 0; j < ncol; ++j) slot[j] = acc[j];
    mean_pool_fwd_arrive<K>(p, s, sp, tile, col0, ncol, acc);
  });
}

// Backward task: g / len of each sequence, converted once, copied to each of its tokens in the chunk.
template <class Cfg>
EJK_HD void mean_pool_bwd_task(const MeanPoolParams& p, i64 c, i64 tile) {
  constexpr ElemKind K = Cfg::kElem;
  const i64 col0 = tile * p.col_tile, ncol = min_of(p.col_tile, p.dim - col0);
  const MeanPoolSpan chunk = mean_pool_chunk(p, c);
  float g[kMeanPoolMaxColTile];
  Elem<K> row[kMeanPoolMaxColTile];
  mean_pool_walk(p, chunk.begin, chunk.end, c == p.chunks - 1, [&](i64 s, const MeanPoolSpan& sp, i64 a, i64 e) {
    if (a == e) return;
    const Elem<K>* src = mean_pool_row<K>(p, s, col0);
    for (i64 j = 0; j < ncol; ++j) g[j] = to_f32<K>(src[j]);
    mean_pool_store_scaled<K>(row, g, mean_pool_scale<float>(sp.end - sp.begin), ncol);
    Elem<K>* dx = static_cast<Elem<K>*>(p.tokens) + mean_pool_token(p, s, a) + col0;
    for (i64 i = 0; i < e - a; ++i) __builtin_memcpy(dx + i * p.tok_stride_t, row, ncol * sizeof(Elem<K>));
  });
}

// Cfg: kElem and kBackward. A variant's template passes a type of its own (internal linkage), so
// objects built for different targets never share one weak copy of this loop.
template <class Cfg>
void mean_pool_tasks(const MeanPoolParams& p, long long task_begin, long long task_end) {
  for (long long t = task_begin; t < task_end; ++t) {
    if constexpr (Cfg::kBackward) mean_pool_bwd_task<Cfg>(p, t / p.col_tiles, t % p.col_tiles);
    else mean_pool_fwd_task<Cfg>(p, t / p.col_tiles, t % p.col_tiles);
  }
}

}  // namespace ejk::cpu
