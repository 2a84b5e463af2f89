#include "ops/page_attention/page_op.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <new>

#include "ejk/core/error.h"
#include "engine/call.h"
#include "registry.h"

namespace ejk::ops {

PageAttentionOp::PageAttentionOp()
    : OpDef("page_attn"), query(tensor("query")), key_cache(tensor("key_cache")), value_cache(tensor("value_cache")),
      context_lens(tensor("context_lens")), block_tables(tensor("block_tables")), out(tensor("out")),
      attn_scale(scalar("attn_scale")), softcap(scalar("attn_logits_soft_cap")),
      sliding_window(scalar("sliding_window")), max_context_len(scalar("max_context_len")),
      num_splits(scalar("num_splits")), sym_S(symbol("S")), sym_Hq(symbol("Hq")), sym_D(symbol("D")),
      sym_NB(symbol("NB")), sym_Hkv(symbol("Hkv")), sym_BS(symbol("BS")), sym_MB(symbol("MB")),
      pv_units(problem_var("units")), pv_kv_tokens(problem_var("kv_tokens")),
      pv_requested_splits(problem_var("requested_splits")) {}

int64_t PageAttentionOp::kv_tokens(const engine::Bound& b) const {
  const int64_t capacity = b.size(sym_MB) * b.size(sym_BS);
  return b.given(max_context_len) ? std::min(capacity, b.i64(max_context_len)) : capacity;
}

void PageAttentionOp::check(const engine::Bound& b) const {
  const int64_t S = b.size(sym_S), Hq = b.size(sym_Hq), Hkv = b.size(sym_Hkv), D = b.size(sym_D);
  const int64_t NB = b.size(sym_NB), BS = b.size(sym_BS), MB = b.size(sym_MB);
  if (Hkv < 1 || Hq % Hkv != 0)
    throw InvalidArgument(fmt::format("{}: query: dim 1 (Hq = {}) must be a positive multiple of key_cache's dim 1 "
                                      "(Hkv = {})", name(), Hq, Hkv));
  if (D < 1) throw InvalidArgument(fmt::format("{}: query: dim 2 (D) must be at least 1, got 0", name()));
  if (BS < 1) throw InvalidArgument(fmt::format("{}: key_cache: dim 2 (block_size) must be at least 1, got 0", name()));
  if (MB * BS > INT32_MAX)
    throw InvalidArgument(fmt::format("{}: block_tables: {} blocks of {} positions exceed the i32 context_lens",
                                      name(), MB, BS));
  if (S > 0 && MB > 0 && NB < 1)
    throw InvalidArgument(fmt::format("{}: key_cache: dim 0 (num_blocks) must be at least 1 for a block table", name()));
  const TensorView &lens = b.tensor(context_lens), &tables = b.tensor(block_tables);
  if (b.args->shapes_only || lens.device.kind != DeviceKind::cpu) return;
  // Host-resident metadata: every used entry is checked once here, so no kernel reads outside
  // the cache (on a GPU the kernels clamp what the host cannot see).
  const auto* len = static_cast<const int32_t*>(lens.data);
  const bool tables_on_host = tables.device.kind == DeviceKind::cpu;
  const auto* tab = static_cast<const int32_t*>(tables.data);
  for (int64_t s = 0; s < S; ++s) {
    const int64_t n = len[s * lens.strides[0]];
    if (n < 0 || n > MB * BS)
      throw InvalidArgument(fmt::format("{}: context_lens[{}]: must be in [0, {}] (block_tables' {} blocks of {}), "
                                        "got {}", name(), s, MB * BS, MB, BS, n));
    if (!tables_on_host) continue;
    // Only the blocks the window reaches: a server may have freed the older ones.
    const int64_t end = std::min(n, kv_tokens(b));
    const int64_t first = b.given(sliding_window) ? std::max<int64_t>(0, end - b.i64(sliding_window)) : 0;
    for (int64_t j = first / BS; j < (end + BS - 1) / BS; ++j) {
      const int64_t blk = tab[s * tables.strides[0] + j * tables.strides[1]];
      if (blk < 0 || blk >= NB)
        throw InvalidArgument(fmt::format("{}: block_tables[{}, {}]: must be a cache block in [0, {}), got {}",
                                          name(), s, j, NB, blk));
    }
  }
}

void PageAttentionOp::problem(const engine::Bound& b, engine::ProblemValues& v) const {
  v.put(pv_units, b.size(sym_S) * b.size(sym_Hkv));
  v.put(pv_kv_tokens, kv_tokens(b));
  v.put(pv_requested_splits, b.i64(num_splits));
}

std::vector<VariantKey> PageAttentionOp::companions(const VariantKey& key) const {
  if (key.backend != "cuda" || !key.get_flag("split")) return {};
  VariantKey combine = detail::op_schema("page_attn_combine").blank_key("cuda", key.target);
  combine.set_enum("dtype", key.get_enum("dtype"));
  return {combine};
}

void PageAttentionOp::plan_facts(const engine::PlanData& plan, void* facts) const {
  auto* f = new (facts) PageFacts{};
  f->split = plan.key.get_flag("split");
}

PageAttentionParams PageAttentionOp::params(const engine::Bound& b) const {
  PageAttentionParams p{};
  p.q = b.data(query), p.k_cache = b.data(key_cache), p.v_cache = b.data(value_cache), p.out = b.data(out);
  p.context_lens = static_cast<const i32*>(b.data(context_lens));
  p.block_tables = static_cast<const i32*>(b.data(block_tables));
  p.seqs = b.size(sym_S), p.q_heads = b.size(sym_Hq), p.kv_heads = b.size(sym_Hkv), p.head_dim = b.size(sym_D);
  p.num_blocks = b.size(sym_NB), p.block_size = b.size(sym_BS), p.max_blocks = b.size(sym_MB);
  p.q_ss = b.stride(query, 0), p.q_sh = b.stride(query, 1);
  if (b.has(out)) p.o_ss = b.stride(out, 0), p.o_sh = b.stride(out, 1);
  p.k_sb = b.stride(key_cache, 0), p.k_sh = b.stride(key_cache, 1), p.k_st = b.stride(key_cache, 2);
  p.v_sb = b.stride(value_cache, 0), p.v_sh = b.stride(value_cache, 1), p.v_st = b.stride(value_cache, 2);
  p.bt_ss = b.stride(block_tables, 0);
  p.scale = float(b.given(attn_scale) ? b.f64(attn_scale) : 1.0 / std::sqrt(double(p.head_dim)));
  p.softcap = b.given(softcap) ? float(b.f64(softcap)) : 0.0f;
  p.window = b.given(sliding_window) ? b.i64(sliding_window) : 0;
  p.max_context = kv_tokens(b);
  p.split_tokens = std::max<int64_t>(p.max_context, 1), p.splits = 1;
  return p;
}

engine::CpuWork PageAttentionOp::cpu_prepare(const engine::Bound& b, const engine::PlanData&, void* params) const {
  static_assert(sizeof(PageAttentionParams) <= kParamBytes);
  const PageAttentionParams& p = *new (params) PageAttentionParams(this->params(b));
  return {p.q_heads == 0 ? 0 : p.seqs * p.kv_heads};
}

double PageAttentionOp::flops(const engine::Bound& b) const {
  // 4 D per visible (head, position): the dot and the weighted sum. Device-resident lengths
  // are not read: the tables' capacity bounds them.
  const PageAttentionParams p = params(b);
  double positions = 0;
  const TensorView& lens = b.tensor(context_lens);
  for (int64_t s = 0; s < p.seqs; ++s) {
    int64_t n = p.max_context;
    if (lens.device.kind == DeviceKind::cpu && lens.data != nullptr)
      n = std::min<int64_t>(p.max_context, std::max(0, static_cast<const int32_t*>(lens.data)[s * lens.strides[0]]));
    positions += double(p.window > 0 ? std::min<int64_t>(n, p.window) : n);
  }
  return 4.0 * double(p.head_dim) * double(p.q_heads) * positions;
}

#if !EJK_HAVE_CUDA
void PageAttentionOp::cuda_launch(const engine::Bound&, const engine::PlanData&, engine::CudaLaunchContext&) const {
  throw BackendUnavailable(
      fmt::format("{}: this build has no CUDA backend (configured with EJK_ENABLE_CUDA=OFF)", name()));
}
engine::OpDef::Workspace PageAttentionOp::cuda_workspace(const engine::Bound&, const engine::PlanData&) const {
  return {};
}
#endif

int64_t PageAttentionOp::cuda_dynamic_smem(const VariantKey& key) const {
  // The larger of the two kernels a variant's entry may run (page_uses_tc decides per call).
  const int64_t d = key.get_int("head_dim"), esize = key.get_enum("dtype") == "f32" ? 4 : 2;
  return std::max(page_smem_bytes(d, esize), page_uses_tc(d, esize, true) ? page_tc_smem_bytes(d) : 0);
}

const PageAttentionOp& page_attention_op() {
  static const PageAttentionOp op;
  return op;
}

EJK_REGISTER_OP(page_attention_op);

}  // namespace ejk::ops
