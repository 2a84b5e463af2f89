#include "ops/ragged_page_attention/ragged_page_op.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <new>

#include "ejk/core/error.h"
#include "ejk/kernels/common/page_attention_params.h"
#include "engine/call.h"
#include "registry.h"

namespace ejk::ops {

RaggedPageFamilyOp::RaggedPageFamilyOp(const char* kernel, const char* soft_cap_name, const char* window_name)
    : OpDef(kernel), softmax_scale(scalar("softmax_scale")), soft_cap(scalar(soft_cap_name)),
      sliding_window(window_name ? scalar(window_name) : -1) {}

engine::CpuWork RaggedPageFamilyOp::cpu_prepare(const engine::Bound& b, const engine::PlanData&, void* params) const {
  static_assert(sizeof(RaggedPageParams) <= kParamBytes);
  const RaggedPageParams& p = *new (params) RaggedPageParams(this->params(b));
  return {p.q_heads == 0 ? 0 : p.tokens * p.kv_heads};
}

#if !EJK_HAVE_CUDA
void RaggedPageFamilyOp::cuda_launch(const engine::Bound&, const engine::PlanData&, engine::CudaLaunchContext&) const {
  throw BackendUnavailable(
      fmt::format("{}: this build has no CUDA backend (configured with EJK_ENABLE_CUDA=OFF)", name()));
}
#endif

int64_t RaggedPageFamilyOp::cuda_dynamic_smem(const VariantKey& key) const {
  // The larger of the two paths a block may take (page_uses_tc decides per call).
  const int64_t d = key.get_int("head_dim"), esize = key.get_enum("dtype") == "f32" ? 4 : 2;
  return std::max(ragged_smem_bytes(d, esize), page_uses_tc(d, esize, true) ? page_tc_smem_bytes(d) : 0);
}

void RaggedPageFamilyOp::set_logits(RaggedPageParams& p, const engine::Bound& b) const {
  p.scale = float(b.given(softmax_scale) ? b.f64(softmax_scale) : 1.0 / std::sqrt(double(p.head_dim)));
  p.softcap = b.given(soft_cap) ? float(b.f64(soft_cap)) : 0.0f;
  p.window = sliding_window >= 0 && b.given(sliding_window) ? b.i64(sliding_window) : 0;
}

double RaggedPageFamilyOp::capacity_flops(const RaggedPageParams& p) {
  return 4.0 * double(p.head_dim) * double(p.q_heads) * double(p.tokens) * double(p.max_pages * p.page_size);
}

RaggedPageAttentionOp::RaggedPageAttentionOp()
    : RaggedPageFamilyOp("ragged_page", "logits_soft_cap"), queries(tensor("queries")), kv_pages(tensor("kv_pages")),
      context_lens(tensor("context_lens")), block_tables(tensor("block_tables")),
      query_start_loc(tensor("query_start_loc")), num_seqs(tensor("num_seqs")), softmax_aux(tensor("softmax_aux")),
      out(tensor("out")), sym_T(symbol("T")), sym_Hq(symbol("Hq")), sym_D(symbol("D")),
      sym_P(symbol("P")), sym_PS(symbol("PS")), sym_H2(symbol("H2")), sym_S(symbol("S")), sym_MB(symbol("MB")) {}

void RaggedPageAttentionOp::check(const engine::Bound& b) const {
  const int64_t Hq = b.size(sym_Hq), H2 = b.size(sym_H2), D = b.size(sym_D);
  const int64_t P = b.size(sym_P), PS = b.size(sym_PS), MB = b.size(sym_MB), S = b.size(sym_S);
  if (H2 < 2 || H2 % 2 != 0)
    throw InvalidArgument(fmt::format("{}: kv_pages: dim 2 (2 * Hkv, K and V interleaved) must be a positive even "
                                      "number, got {}", name(), H2));
  if (Hq % (H2 / 2) != 0)
    throw InvalidArgument(fmt::format("{}: queries: dim 1 (Hq = {}) must be a positive multiple of Hkv = {} "
                                      "(kv_pages' dim 2 / 2)", name(), Hq, H2 / 2));
  if (D < 1) throw InvalidArgument(fmt::format("{}: queries: dim 2 (D) must be at least 1, got 0", name()));
  if (PS < 1) throw InvalidArgument(fmt::format("{}: kv_pages: dim 1 (page_size) must be at least 1, got 0", name()));
  if (MB * PS > INT32_MAX)
    throw InvalidArgument(fmt::format("{}: block_tables: {} pages of {} positions exceed the i32 context_lens",
                                      name(), MB, PS));
  if (S > 0 && MB > 0 && P < 1)
    throw InvalidArgument(fmt::format("{}: kv_pages: dim 0 (num_pages) must be at least 1 for a block table", name()));
  if (!b.args->shapes_only) check_host_metadata(b);
}

void RaggedPageAttentionOp::check_host_metadata(const engine::Bound& b) const {
  const TensorView& ns_t = b.tensor(num_seqs);
  if (ns_t.device.kind != DeviceKind::cpu) return;
  const int64_t ns = static_cast<const int32_t*>(ns_t.data)[0], S = b.size(sym_S);
  if (ns < 0 || ns > S)
    throw InvalidArgument(fmt::format("{}: num_seqs: must be in [0, {}] (context_lens' length), got {}", name(), S, ns));
  check_ragged_metadata(name(), {ns, b.size(sym_T), b.size(sym_P), b.size(sym_PS), b.size(sym_MB),
                                 b.given(sliding_window) ? b.i64(sliding_window) : 0},
                        b.tensor(query_start_loc), b.tensor(context_lens), b.tensor(block_tables));
}

// Host-resident metadata: every entry a query can reach is checked once here, so no kernel
// reads outside the cache or the queries (device-resident tables are clamped by the kernels).
void check_ragged_metadata(std::string_view op, const RaggedSizes& z, const TensorView& qsl, const TensorView& lens,
                           const TensorView& tables) {
  if (lens.device.kind != DeviceKind::cpu || (!z.decode && qsl.device.kind != DeviceKind::cpu)) return;
  const auto* qs = static_cast<const int32_t*>(qsl.data);
  const auto* len = static_cast<const int32_t*>(lens.data);
  const auto* tab = static_cast<const int32_t*>(tables.data);
  const bool tables_on_host = tables.device.kind == DeviceKind::cpu;
  for (int64_t s = 0; !z.decode && s <= z.seqs; ++s) {
    if (qs[s] < 0 || qs[s] > z.tokens)
      throw InvalidArgument(fmt::format("{}: query_start_loc[{}]: must be in [0, {}] (the queries' tokens), got {}",
                                        op, s, z.tokens, qs[s]));
    if (s > 0 && qs[s] < qs[s - 1])
      throw InvalidArgument(fmt::format("{}: query_start_loc[{}]: must be at least entry {} ({}), got {}", op, s,
                                        s - 1, qs[s - 1], qs[s]));
  }
  const int64_t cap = z.max_pages * z.page_size;
  for (int64_t s = 0; s < z.seqs; ++s) {
    // A decode query is not a cache position: its context may be empty.
    const int64_t n = len[s * lens.strides[0]], n_q = z.decode ? 1 : qs[s + 1] - qs[s], lo = z.decode ? 0 : n_q;
    if (n < lo || n > cap)
      throw InvalidArgument(fmt::format("{}: {}[{}]: must be in [{}, {}] ({}{}' {} pages of {}), got {}", op,
                                        z.lens_arg, s, lo, cap,
                                        z.decode ? "" : fmt::format("its {} query tokens; ", n_q), z.tables_arg, z.max_pages,
                                        z.page_size, n));
    if (!tables_on_host || n_q == 0) continue;
    // Only the pages a query reaches: the window's oldest is the first query's.
    const int64_t first = z.window > 0 ? std::max<int64_t>(0, n - n_q - z.window + 1) : 0;
    for (int64_t j = first / z.page_size; j < (n + z.page_size - 1) / z.page_size; ++j) {
      const int64_t page = tab[s * tables.strides[0] + j * tables.strides[1]];
      if (page < 0 || page >= z.num_pages)
        throw InvalidArgument(fmt::format("{}: {}[{}, {}]: must be a page in [0, {}), got {}", op, z.tables_arg, s, j,
                                          z.num_pages, page));
    }
  }
}

RaggedPageParams RaggedPageAttentionOp::params(const engine::Bound& b) const {
  RaggedPageParams p{};
  p.q = b.data(queries), p.out = b.data(out);
  p.context_lens = static_cast<const i32*>(b.data(context_lens));
  p.block_tables = static_cast<const i32*>(b.data(block_tables));
  p.query_start = static_cast<const i32*>(b.data(query_start_loc));
  p.num_seqs = static_cast<const i32*>(b.data(num_seqs));
  p.sinks = b.has(softmax_aux) ? static_cast<const float*>(b.data(softmax_aux)) : nullptr;
  p.tokens = b.size(sym_T), p.seqs = b.size(sym_S), p.q_heads = b.size(sym_Hq), p.kv_heads = b.size(sym_H2) / 2;
  p.head_dim = b.size(sym_D), p.num_pages = b.size(sym_P), p.page_size = b.size(sym_PS), p.max_pages = b.size(sym_MB);
  p.q_st = b.stride(queries, 0), p.q_sh = b.stride(queries, 1);
  if (b.has(out)) p.o_st = b.stride(out, 0), p.o_sh = b.stride(out, 1);
  // K of kv head g is head row 2g, V is 2g + 1: one base each, the head stride doubled.
  const int64_t row = b.stride(kv_pages, 2);
  p.k_sp = p.v_sp = b.stride(kv_pages, 0), p.k_ss = p.v_ss = b.stride(kv_pages, 1), p.k_sh = p.v_sh = 2 * row;
  p.k = b.data(kv_pages);
  const size_t esize = dtype_size(b.tensor(kv_pages).dtype);
  p.v = p.k == nullptr ? nullptr : static_cast<const char*>(p.k) + row * int64_t(esize);
  p.bt_ss = b.stride(block_tables, 0);
  set_logits(p, b);
  return p;
}

double RaggedPageAttentionOp::flops(const engine::Bound& b) const {
  // 4 D per visible (query head, position): the dot and the weighted sum; device-resident
  // metadata is not read, so there each token counts as seeing the tables' capacity.
  const RaggedPageParams p = params(b);
  const TensorView &qsl = b.tensor(query_start_loc), &lens = b.tensor(context_lens), &ns = b.tensor(num_seqs);
  const bool host = qsl.data && lens.data && ns.data && qsl.device.kind == DeviceKind::cpu &&
                    lens.device.kind == DeviceKind::cpu && ns.device.kind == DeviceKind::cpu;
  double positions = 0;
  for (int64_t t = 0; t < p.tokens; ++t) {
    if (!host) { positions += double(p.max_pages * p.page_size); continue; }
    const RaggedSpan span = ragged_span(p, t);
    positions += double(span.end - span.begin);
  }
  return 4.0 * double(p.head_dim) * double(p.q_heads) * positions;
}

const RaggedPageAttentionOp& ragged_page_attention_op() {
  static const RaggedPageAttentionOp op;
  return op;
}

EJK_REGISTER_OP(ragged_page_attention_op);

}  // namespace ejk::ops
