#include "flash_case.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>

#include "ejk/core/error.h"
#include "ejk/half.h"
#include "ejk/kernels/common/mask.h"
#include "npy.h"

namespace ejk::cli {
namespace {

// Rounds float32 values to `dtype` and returns the typed tensor; `values` is updated to hold
// exactly the typed values.
Tensor to_typed(Tensor& values, DType dtype) {
  if (dtype == DType::f32) return values;
  Tensor t = Tensor::empty(values.shape(), dtype);
  float* v = values.data_as<float>();
  auto* h = t.data_as<uint16_t>();
  for (int64_t i = 0; i < values.numel(); ++i) {
    h[i] = dtype == DType::bf16 ? float_to_bf16(v[i]) : float_to_f16(v[i]);
    v[i] = dtype == DType::bf16 ? bf16_to_float(h[i]) : f16_to_float(h[i]);
  }
  return t;
}

Tensor random_normal(std::vector<int64_t> shape, std::mt19937_64& rng, float stddev = 1.0f) {
  Tensor t = Tensor::empty(std::move(shape), DType::f32);
  std::normal_distribution<float> nd(0.0f, stddev);
  float* p = t.data_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = nd(rng);
  return t;
}

// Random cut points: n non-negative lengths summing to total (each >= 1 when total >= n).
std::vector<int32_t> random_cum(int64_t n, int64_t total, std::mt19937_64& rng) {
  std::vector<int32_t> cuts;
  int64_t slack = total >= n ? total - n : total;
  std::uniform_int_distribution<int64_t> u(0, slack);
  for (int64_t i = 0; i + 1 < n; ++i) cuts.push_back(static_cast<int32_t>(u(rng)));
  std::sort(cuts.begin(), cuts.end());
  std::vector<int32_t> cum{0};
  int64_t base = total >= n ? 1 : 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t hi = i + 1 < n ? cuts[i] : slack;
    int64_t lo = i == 0 ? 0 : cuts[i - 1];
    cum.push_back(static_cast<int32_t>(cum.back() + (hi - lo) + base));
  }
  return cum;
}

Tensor i32_tensor(const std::vector<int32_t>& v, std::vector<int64_t> shape) {
  Tensor t = Tensor::empty(std::move(shape), DType::i32);
  std::copy(v.begin(), v.end(), t.data_as<int32_t>());
  return t;
}

// Segment ids in runs: ids 0..n-1 over the sequence, and a padded tail (-1) for q sometimes.
std::vector<int32_t> random_segments(int64_t b, int64_t len, int64_t nseg, bool pad_tail, std::mt19937_64& rng) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < b; ++i) {
    auto cum = random_cum(nseg, len, rng);
    for (int64_t s = 0; s < nseg; ++s)
      for (int32_t j = cum[s]; j < cum[s + 1]; ++j) ids.push_back(static_cast<int32_t>(s));
    if (pad_tail && len > 2) {
      int64_t pad = std::uniform_int_distribution<int64_t>(0, len / 4)(rng);
      for (int64_t j = len - pad; j < len; ++j) ids[i * len + j] = -1;
    }
  }
  return ids;
}

}  // namespace

Tensor to_f32(const Tensor& t) {
  if (t.dtype() == DType::f32) return t;
  Tensor out = Tensor::empty(t.shape(), DType::f32);
  const auto* h = t.data_as<uint16_t>();
  for (int64_t i = 0; i < t.numel(); ++i)
    out.data_as<float>()[i] = t.dtype() == DType::bf16 ? bf16_to_float(h[i]) : f16_to_float(h[i]);
  return out;
}

FlashCase make_random_case(const FlashCaseSpec& s) {
  FlashCase c;
  c.spec = s;
  std::mt19937_64 rng(s.seed);
  std::vector<int64_t> qshape = s.varlen ? std::vector<int64_t>{s.sq, s.hq, s.d} : std::vector<int64_t>{s.b, s.sq, s.hq, s.d};
  std::vector<int64_t> kshape = s.varlen ? std::vector<int64_t>{s.sk, s.hkv, s.d} : std::vector<int64_t>{s.b, s.sk, s.hkv, s.d};
  c.q_values = random_normal(qshape, rng);
  c.k_values = random_normal(kshape, rng);
  c.v_values = random_normal(kshape, rng);
  c.q = to_typed(c.q_values, s.dtype);
  c.k = to_typed(c.k_values, s.dtype);
  c.v = to_typed(c.v_values, s.dtype);
  if (s.bias) {
    c.bias_values = random_normal({s.b, s.hq, s.sq, s.sk}, rng);
    c.bias = to_typed(c.bias_values, s.dtype);
  }
  if (s.sinks) c.softmax_aux = random_normal({s.hq}, rng);
  if (s.segments) {
    int64_t nseg = std::uniform_int_distribution<int64_t>(1, 3)(rng);
    c.q_segment_ids = i32_tensor(random_segments(s.b, s.sq, nseg, true, rng), {s.b, s.sq});
    c.kv_segment_ids = i32_tensor(random_segments(s.b, s.sk, nseg, false, rng), {s.b, s.sk});
  }
  if (s.varlen) {
    c.cum_seqlens_q = i32_tensor(random_cum(s.b, s.sq, rng), {s.b + 1});
    c.cum_seqlens_k = i32_tensor(random_cum(s.b, s.sk, rng), {s.b + 1});
  }
  return c;
}

FlashAttentionInputs FlashCase::inputs() const {
  FlashAttentionInputs in;
  in.q = q.view();
  in.k = k.view();
  in.v = v.view();
  if (bias) in.bias = bias.view();
  if (q_segment_ids) in.q_segment_ids = q_segment_ids.view();
  if (kv_segment_ids) in.kv_segment_ids = kv_segment_ids.view();
  if (cum_seqlens_q) in.cum_seqlens_q = cum_seqlens_q.view();
  if (cum_seqlens_k) in.cum_seqlens_k = cum_seqlens_k.view();
  if (softmax_aux) in.softmax_aux = softmax_aux.view();
  return in;
}

FlashAttentionInputs FlashCase::inputs_on(Device device, std::vector<Tensor>& keep) const {
  FlashAttentionInputs in = inputs();
  if (device.kind == DeviceKind::cpu) return in;
  auto move = [&](TensorView& v, const Tensor& t) {
    keep.push_back(t.to(device));
    v = keep.back().view();
  };
  move(in.q, q);
  move(in.k, k);
  move(in.v, v);
  if (bias) move(*in.bias, bias);
  if (q_segment_ids) move(*in.q_segment_ids, q_segment_ids);
  if (kv_segment_ids) move(*in.kv_segment_ids, kv_segment_ids);
  if (cum_seqlens_q) move(*in.cum_seqlens_q, cum_seqlens_q);
  if (cum_seqlens_k) move(*in.cum_seqlens_k, cum_seqlens_k);
  return in;
}

FlashAttentionOptions FlashCase::options(Backend backend, int64_t block_q, int64_t block_k) const {
  FlashAttentionOptions o;
  o.softmax_scale = spec.scale;
  o.causal = spec.causal;
  o.sliding_window = spec.window;
  o.logits_soft_cap = spec.softcap;
  o.normalize_output = spec.normalize_output;
  o.backend = backend;
  o.block_q = block_q;
  o.block_k = block_k;
  return o;
}

double FlashCase::visible_pairs() const {
  MaskSpec m;
  m.causal = spec.causal;
  if (spec.window) {
    m.window_left = spec.window->left;
    m.window_right = spec.window->right;
  }
  auto pairs = [&](int64_t sq, int64_t sk) {
    double n = 0;
    for (int64_t i = 0; i < sq; ++i) {
      int64_t lo = std::max<int64_t>(0, first_visible_key(i, m));
      int64_t hi = std::min<int64_t>(sk - 1, last_visible_key(i, m));
      if (hi >= lo) n += static_cast<double>(hi - lo + 1);
    }
    return n;
  };
  if (!cum_seqlens_q) return spec.b * pairs(spec.sq, spec.sk);
  double n = 0;
  const auto* cq = cum_seqlens_q.data_as<int32_t>();
  const auto* ck = cum_seqlens_k.data_as<int32_t>();
  for (int64_t i = 0; i + 1 < cum_seqlens_q.numel(); ++i) n += pairs(cq[i + 1] - cq[i], ck[i + 1] - ck[i]);
  return n;
}

void save_case(const FlashCase& c, const Tensor& out, const Tensor& lse, const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  save_npy(dir / "q.npy", c.q_values);
  save_npy(dir / "k.npy", c.k_values);
  save_npy(dir / "v.npy", c.v_values);
  if (c.bias) save_npy(dir / "bias.npy", c.bias_values);
  if (c.q_segment_ids) save_npy(dir / "q_segment_ids.npy", c.q_segment_ids);
  if (c.kv_segment_ids) save_npy(dir / "kv_segment_ids.npy", c.kv_segment_ids);
  if (c.cum_seqlens_q) save_npy(dir / "cum_seqlens_q.npy", c.cum_seqlens_q);
  if (c.cum_seqlens_k) save_npy(dir / "cum_seqlens_k.npy", c.cum_seqlens_k);
  if (c.softmax_aux) save_npy(dir / "softmax_aux.npy", c.softmax_aux);
  save_npy(dir / "out.npy", to_f32(out));
  save_npy(dir / "lse.npy", lse);
  const auto& s = c.spec;
  nlohmann::json p;
  p["dtype"] = std::string(dtype_name(s.dtype));
  p["softmax_scale"] = s.scale ? *s.scale : 1.0f / std::sqrt(static_cast<float>(s.d));
  p["causal"] = s.causal;
  p["sliding_window"] = s.window ? nlohmann::json::array({s.window->left, s.window->right}) : nlohmann::json();
  p["logits_soft_cap"] = s.softcap ? nlohmann::json(*s.softcap) : nlohmann::json();
  p["normalize_output"] = s.normalize_output;
  p["seed"] = s.seed;
  std::ofstream(dir / "params.json") << p.dump(2) << "\n";
}

FlashCase load_case(const std::filesystem::path& dir) {
  std::ifstream pf(dir / "params.json");
  if (!pf) throw InvalidArgument(fmt::format("--load {}: params.json not found", dir.string()));
  nlohmann::json p;
  try {
    p = nlohmann::json::parse(pf);
  } catch (const std::exception& e) {
    throw InvalidArgument(fmt::format("--load {}/params.json: {}", dir.string(), e.what()));
  }
  FlashCase c;
  auto& s = c.spec;
  s.dtype = parse_dtype(p.value("dtype", "f32"));
  if (p.contains("softmax_scale") && !p["softmax_scale"].is_null()) s.scale = p["softmax_scale"].get<float>();
  s.causal = p.value("causal", false);
  if (p.contains("sliding_window") && !p["sliding_window"].is_null())
    s.window = SlidingWindow{p["sliding_window"][0].get<int64_t>(), p["sliding_window"][1].get<int64_t>()};
  if (p.contains("logits_soft_cap") && !p["logits_soft_cap"].is_null()) s.softcap = p["logits_soft_cap"].get<float>();
  s.normalize_output = p.value("normalize_output", true);
  auto load_opt = [&](const char* name) {
    auto path = dir / (std::string(name) + ".npy");
    return std::filesystem::exists(path) ? load_npy(path) : Tensor{};
  };
  auto float_input = [&](const char* name, Tensor& values) {
    values = load_opt(name);
    if (values && values.dtype() != DType::f32)
      throw InvalidArgument(fmt::format("--load: {}.npy must hold float32 values", name));
    return values ? to_typed(values, s.dtype) : Tensor{};
  };
  c.q = float_input("q", c.q_values);
  c.k = float_input("k", c.k_values);
  c.v = float_input("v", c.v_values);
  if (!c.q || !c.k || !c.v) throw InvalidArgument(fmt::format("--load {}: q.npy, k.npy and v.npy are required", dir.string()));
  c.bias = float_input("bias", c.bias_values);
  c.q_segment_ids = load_opt("q_segment_ids");
  c.kv_segment_ids = load_opt("kv_segment_ids");
  c.cum_seqlens_q = load_opt("cum_seqlens_q");
  c.cum_seqlens_k = load_opt("cum_seqlens_k");
  c.softmax_aux = load_opt("softmax_aux");
  s.varlen = static_cast<bool>(c.cum_seqlens_q);
  s.bias = static_cast<bool>(c.bias);
  s.sinks = static_cast<bool>(c.softmax_aux);
  s.segments = static_cast<bool>(c.q_segment_ids);
  const auto& qs = c.q.shape();
  const auto& ks = c.k.shape();
  if (qs.size() < 3 || qs.size() > 4 || ks.size() != qs.size())
    throw InvalidArgument(fmt::format("--load {}: q.npy and k.npy must both have rank 4 ([B, S, H, D]) "
                                      "or 3 (packed varlen), got ranks {} and {}", dir.string(), qs.size(), ks.size()));
  size_t off = qs.size() == 3 ? 1 : 0;
  s.b = s.varlen ? std::max<int64_t>(1, c.cum_seqlens_q.numel() - 1) : qs[0];
  s.sq = qs[1 - off];
  s.hq = qs[2 - off];
  s.d = qs[3 - off];
  s.sk = ks[1 - off];
  s.hkv = ks[2 - off];
  return c;
}

}  // namespace ejk::cli
