#include "ops/multi_latent_ragged_page_attention/mla_page_op.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <new>

#include "ejk/core/error.h"
#include "engine/call.h"
#include "registry.h"

namespace ejk::ops {

MlaPageAttentionOp::MlaPageAttentionOp()
    : OpDef("mla_page"), queries_nope(tensor("queries_nope")), queries_pe(tensor("queries_pe")),
      keys_values(tensor("keys_values")), keys_pe(tensor("keys_pe")), kv_cache(tensor("kv_cache")),
      kv_lens(tensor("kv_lens")), block_tables(tensor("block_tables")), query_start_loc(tensor("query_start_loc")),
      distribution(tensor("distribution")), out(tensor("out")), softmax_scale(scalar("softmax_scale")),
      sliding_window(scalar("sliding_window")), logits_soft_cap(scalar("logits_soft_cap")),
      q_scale(scalar("q_scale")), k_scale(scalar("k_scale")), v_scale(scalar("v_scale")), sym_T(symbol("T")),
      sym_Hq(symbol("Hq")), sym_R(symbol("R")), sym_E(symbol("E")), sym_P(symbol("P")), sym_PSP(symbol("PSP")),
      sym_PK(symbol("PK")), sym_KD(symbol("KD")), sym_S(symbol("S")), sym_SMB(symbol("SMB")) {}

void MlaPageAttentionOp::check(const engine::Bound& b) const {
  const int64_t R = b.size(sym_R), E = b.size(sym_E), PK = b.size(sym_PK), KD = b.size(sym_KD);
  const int64_t S = b.size(sym_S), SMB = b.size(sym_SMB), P = b.size(sym_P), PSP = b.size(sym_PSP);
  if (R < 1 || E < 1)
    throw InvalidArgument(fmt::format("{}: queries_nope, queries_pe: dim 2 (R = {}, E = {}) must be at least 1",
                                      name(), R, E));
  // The seed's packing: as many elements as fit in 32 bits share a sublane row.
  const int64_t pack = 4 / int64_t(dtype_size(b.dtype));
  if (PK != pack)
    throw InvalidArgument(fmt::format("{}: kv_cache: dim 2 (PK) must be {} for {} (32 bits of elements), got {}",
                                      name(), pack, dtype_name(b.dtype), PK));
  if (KD != mla_align128(R) + mla_align128(E))
    throw InvalidArgument(fmt::format("{}: kv_cache: dim 3 (KD) must be align128(R) + align128(E) = {} + {} = {}, "
                                      "got {}", name(), mla_align128(R), mla_align128(E),
                                      mla_align128(R) + mla_align128(E), KD));
  if (S < 1) throw InvalidArgument(fmt::format("{}: kv_lens: must hold at least one sequence, got 0", name()));
  if (SMB % S != 0)
    throw InvalidArgument(fmt::format("{}: block_tables: length {} must be a multiple of kv_lens' {} (S * pages per "
                                      "sequence, flattened)", name(), SMB, S));
  if (PSP < 1) throw InvalidArgument(fmt::format("{}: kv_cache: dim 1 (page_size / PK) must be at least 1, got 0", name()));
  if (SMB / S * PSP * PK > INT32_MAX)
    throw InvalidArgument(fmt::format("{}: block_tables: {} pages of {} positions exceed the i32 kv_lens", name(),
                                      SMB / S, PSP * PK));
  if (SMB > 0 && P < 1)
    throw InvalidArgument(fmt::format("{}: kv_cache: dim 0 (num_pages) must be at least 1 for a block table", name()));
  if (!b.args->shapes_only) check_host_metadata(b);
}

// Host-resident metadata: every entry a query can reach is checked once here, so no kernel
// reads outside the cache or the keys (device-resident tables are clamped by the kernels).
void MlaPageAttentionOp::check_host_metadata(const engine::Bound& b) const {
  const TensorView &dist = b.tensor(distribution), &qsl = b.tensor(query_start_loc), &lens = b.tensor(kv_lens);
  const TensorView& tables = b.tensor(block_tables);
  if (dist.device.kind != DeviceKind::cpu || qsl.device.kind != DeviceKind::cpu || lens.device.kind != DeviceKind::cpu)
    return;
  const int64_t S = b.size(sym_S), T = b.size(sym_T), P = b.size(sym_P), MB = b.size(sym_SMB) / S;
  const int64_t PS = b.size(sym_PSP) * b.size(sym_PK), W = b.given(sliding_window) ? b.i64(sliding_window) : 0;
  const int64_t ns = static_cast<const int32_t*>(dist.data)[2 * dist.strides[0]];
  if (ns < 0 || ns > S)
    throw InvalidArgument(fmt::format("{}: distribution[2]: the sequences processed must be in [0, {}] (kv_lens' "
                                      "length), got {}", name(), S, ns));
  const auto* qs = static_cast<const int32_t*>(qsl.data);
  for (int64_t s = 0; s <= ns; ++s) {
    if (qs[s] < 0 || qs[s] > T)
      throw InvalidArgument(fmt::format("{}: query_start_loc[{}]: must be in [0, {}] (the queries' tokens), got {}",
                                        name(), s, T, qs[s]));
    if (s > 0 && qs[s] < qs[s - 1])
      throw InvalidArgument(fmt::format("{}: query_start_loc[{}]: must be at least entry {} ({}), got {}", name(), s,
                                        s - 1, qs[s - 1], qs[s]));
  }
  const auto* len = static_cast<const int32_t*>(lens.data);
  const auto* tab = static_cast<const int32_t*>(tables.data);
  for (int64_t s = 0; s < ns; ++s) {
    const int64_t n = len[s * lens.strides[0]], n_q = qs[s + 1] - qs[s];
    if (n < n_q || n > MB * PS)
      throw InvalidArgument(fmt::format("{}: kv_lens[{}]: must be in [{}, {}] (its {} query tokens; {} pages of {}), "
                                        "got {}", name(), s, n_q, MB * PS, n_q, MB, PS, n));
    if (tables.device.kind != DeviceKind::cpu || n_q == 0) continue;
    // Only the cached positions a query reads: this call's tokens come from the keys.
    const int64_t first = W > 0 ? std::max<int64_t>(0, n - n_q - W + 1) : 0;
    for (int64_t j = first / PS; j < (n - n_q + PS - 1) / PS; ++j) {
      const int64_t page = tab[(s * MB + j) * tables.strides[0]];
      if (page < 0 || page >= P)
        throw InvalidArgument(fmt::format("{}: block_tables[{}] (sequence {}, page {}): must be a page in [0, {}), "
                                          "got {}", name(), s * MB + j, s, j, P, page));
    }
  }
}

MlaPageParams MlaPageAttentionOp::params(const engine::Bound& b) const {
  MlaPageParams p{};
  p.q_nope = b.data(queries_nope), p.q_pe = b.data(queries_pe), p.out = b.data(out);
  p.new_c = b.data(keys_values), p.new_pe = b.data(keys_pe), p.cache = b.data(kv_cache);
  p.kv_lens = static_cast<const i32*>(b.data(kv_lens));
  p.block_tables = static_cast<const i32*>(b.data(block_tables));
  p.query_start = static_cast<const i32*>(b.data(query_start_loc));
  p.distribution = static_cast<const i32*>(b.data(distribution));
  p.tokens = b.size(sym_T), p.seqs = b.size(sym_S), p.q_heads = b.size(sym_Hq);
  p.latent = b.size(sym_R), p.rope = b.size(sym_E), p.num_pages = b.size(sym_P);
  p.pack = b.size(sym_PK), p.page_size = b.size(sym_PSP) * p.pack;
  p.max_pages = p.seqs > 0 ? b.size(sym_SMB) / p.seqs : 0;
  p.pe_offset = mla_align128(p.latent);
  p.qn_st = b.stride(queries_nope, 0), p.qn_sh = b.stride(queries_nope, 1);
  p.qp_st = b.stride(queries_pe, 0), p.qp_sh = b.stride(queries_pe, 1);
  p.nc_st = b.stride(keys_values, 0), p.np_st = b.stride(keys_pe, 0);
  if (b.has(out)) p.o_st = b.stride(out, 0), p.o_sh = b.stride(out, 1);
  p.c_sp = b.stride(kv_cache, 0), p.c_sq = b.stride(kv_cache, 1), p.c_sk = b.stride(kv_cache, 2);
  p.bt_s = b.stride(block_tables, 0);
  // The dequantization scales fold into the one logit scale and the output's factor.
  double scale = b.given(softmax_scale) ? b.f64(softmax_scale) : 1.0 / std::sqrt(double(p.latent + p.rope));
  if (b.given(q_scale)) scale *= b.f64(q_scale);
  if (b.given(k_scale)) scale *= b.f64(k_scale);
  p.scale = float(scale);
  p.softcap = b.given(logits_soft_cap) ? float(b.f64(logits_soft_cap)) : 0.0f;
  p.v_scale = b.given(v_scale) ? float(b.f64(v_scale)) : 1.0f;
  p.window = b.given(sliding_window) ? b.i64(sliding_window) : 0;
  return p;
}

engine::CpuWork MlaPageAttentionOp::cpu_prepare(const engine::Bound& b, const engine::PlanData&, void* params) const {
  static_assert(sizeof(MlaPageParams) <= kParamBytes);
  const MlaPageParams& p = *new (params) MlaPageParams(this->params(b));
  return {p.q_heads == 0 ? 0 : p.tokens * mla_cpu_head_blocks(p.q_heads)};
}

int64_t MlaPageAttentionOp::cuda_dynamic_smem(const VariantKey& key) const {
  return mla_cuda_smem_bytes(key.get_int("latent_dim"), key.get_int("rope_dim"));
}

double MlaPageAttentionOp::flops(const engine::Bound& b) const {
  // 2 (R + E) for the score and 2 R for the weighted sum per visible (query head, position);
  // device-resident metadata is not read, so there each token counts as seeing the tables' capacity.
  const MlaPageParams p = params(b);
  const TensorView &qsl = b.tensor(query_start_loc), &lens = b.tensor(kv_lens), &dist = b.tensor(distribution);
  const bool host = qsl.data && lens.data && dist.data && qsl.device.kind == DeviceKind::cpu &&
                    lens.device.kind == DeviceKind::cpu && dist.device.kind == DeviceKind::cpu;
  double positions = 0;
  for (int64_t t = 0; t < p.tokens; ++t) {
    if (!host) { positions += double(p.max_pages * p.page_size); continue; }
    const MlaSpan span = mla_span(p, t);
    positions += double(span.end - span.begin);
  }
  return double(2 * (2 * p.latent + p.rope)) * double(p.q_heads) * positions;
}

const MlaPageAttentionOp& mla_page_attention_op() {
  static const MlaPageAttentionOp op;
  return op;
}

EJK_REGISTER_OP(mla_page_attention_op);

}  // namespace ejk::ops
