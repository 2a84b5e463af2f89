#include "flash_validate.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstring>

#include "device_memory.h"
#include "ejk/core/error.h"
#include "ejk/half.h"

namespace ejk::detail {
namespace {

[[noreturn]] void bad(const std::string& msg) { throw InvalidArgument("flash_attention: " + msg); }

std::string shape_str(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

void expect_rank(const TensorView& t, const char* name, int64_t rank, const char* layout) {
  if (t.rank() != rank)
    bad(fmt::format("{}: expected rank {} {}, got shape {}", name, rank, layout, shape_str(t.shape)));
  if (t.strides.size() != t.shape.size())
    bad(fmt::format("{}: has {} strides for {} dimensions", name, t.strides.size(), t.shape.size()));
  if (!t.data && t.numel() > 0) bad(fmt::format("{}: data pointer is null", name));
}

void expect_dim(const TensorView& t, const char* name, int axis, int64_t want, const char* what) {
  if (t.shape[axis] != want)
    bad(fmt::format("{}: dimension {} ({}) must be {}, got {} (shape {})", name, axis, what, want,
                    t.shape[axis], shape_str(t.shape)));
}

void expect_dtype(const TensorView& t, const char* name, DType want) {
  if (t.dtype != want)
    bad(fmt::format("{}: expected dtype {}, got {}", name, dtype_name(want), dtype_name(t.dtype)));
}

void expect_inner_contiguous(const TensorView& t, const char* name) {
  if (!t.shape.empty() && t.shape.back() > 1 && t.strides.back() != 1)
    bad(fmt::format("{}: the last dimension must be contiguous (stride 1), got stride {}", name,
                    t.strides.back()));
}

void expect_device(const TensorView& t, const char* name, Device d) {
  if (!(t.device == d))
    bad(fmt::format("{}: expected a tensor on {} (where q is), got {}", name, to_string(d),
                    to_string(t.device)));
}

// Reads a 1-D int32 tensor (cum_seqlens) into host memory, from whichever device holds it.
std::vector<int32_t> read_i32(const TensorView& t, const char* name) {
  if (t.shape[0] > 1 && t.strides[0] != 1) bad(fmt::format("{}: must be contiguous", name));
  std::vector<int32_t> v(t.shape[0]);
  copy_to_host(t.device, t.data, v.data(), v.size() * sizeof(int32_t));
  return v;
}

// Element `offset` of a floating tensor whose bytes were copied to `bytes`.
float read_float(const std::vector<unsigned char>& bytes, DType dtype, int64_t offset) {
  const unsigned char* p = bytes.data() + offset * static_cast<int64_t>(dtype_size(dtype));
  switch (dtype) {
    case DType::f32: { float f; std::memcpy(&f, p, 4); return f; }
    case DType::f64: { double d; std::memcpy(&d, p, 8); return static_cast<float>(d); }
    case DType::bf16: { uint16_t h; std::memcpy(&h, p, 2); return bf16_to_float(h); }
    case DType::f16: { uint16_t h; std::memcpy(&h, p, 2); return f16_to_float(h); }
    default: return 0;
  }
}

struct Dims { int64_t batch, sq, sk, hq, hkv, d; };

// q/k/v layouts; fills the sizes and strides of params.
Dims check_qkv(const FlashAttentionInputs& in, bool varlen, FlashFwdParams& p) {
  const TensorView &q = in.q, &k = in.k, &v = in.v;
  const char* layout_q = varlen ? "[total_q, Hq, D] or [1, total_q, Hq, D]" : "[B, Sq, Hq, D]";
  const char* layout_kv = varlen ? "[total_k, Hkv, D] or [1, total_k, Hkv, D]" : "[B, Sk, Hkv, D]";
  // Packed varlen tensors may come with or without a leading batch of 1.
  auto check_rank = [&](const TensorView& t, const char* name, const char* layout) {
    if (varlen && t.rank() == 3) return expect_rank(t, name, 3, layout);
    expect_rank(t, name, 4, layout);
    if (varlen && t.shape[0] != 1)
      bad(fmt::format("{}: packed varlen tensors have batch 1, got shape {}", name, shape_str(t.shape)));
  };
  check_rank(q, "q", layout_q);
  check_rank(k, "k", layout_kv);
  check_rank(v, "v", layout_kv);
  // Logical axes 0 batch, 1 seq, 2 head, 3 dim; a rank-3 packed tensor has no batch axis.
  auto at = [&](const TensorView& t, int logical) { return logical - ((varlen && t.rank() == 3) ? 1 : 0); };
  Dims d{};
  d.batch = varlen ? 1 : q.shape[0];
  d.sq = q.shape[at(q, 1)];
  d.hq = q.shape[at(q, 2)];
  d.d = q.shape[at(q, 3)];
  d.sk = k.shape[at(k, 1)];
  d.hkv = k.shape[at(k, 2)];

  if (!is_floating(q.dtype) || q.dtype == DType::f64)
    bad(fmt::format("q: expected dtype f32, bf16 or f16, got {}", dtype_name(q.dtype)));
  expect_dtype(k, "k", q.dtype);
  expect_dtype(v, "v", q.dtype);
  expect_device(k, "k", q.device);
  expect_device(v, "v", q.device);
  if (!varlen) expect_dim(k, "k", 0, d.batch, "batch, as q");
  if (k.shape[at(k, 3)] != d.d)
    bad(fmt::format("k: head_dim must equal q's head_dim {}, got {}", d.d, k.shape[at(k, 3)]));
  if (v.shape != k.shape)
    bad(fmt::format("v: expected the shape of k {}, got {}", shape_str(k.shape), shape_str(v.shape)));
  if (d.hkv <= 0 || d.hq % d.hkv != 0)
    bad(fmt::format("k: number of kv heads ({}) must divide the number of q heads ({})", d.hkv, d.hq));
  if (d.d <= 0) bad(fmt::format("q: head_dim must be positive, got {}", d.d));
  expect_inner_contiguous(q, "q");
  expect_inner_contiguous(k, "k");
  expect_inner_contiguous(v, "v");

  auto strides = [&](const TensorView& t, i64& sb, i64& ss, i64& sh) {
    sb = (varlen && t.rank() == 3) ? 0 : t.strides[0];
    ss = t.strides[at(t, 1)];
    sh = t.strides[at(t, 2)];
  };
  strides(q, p.q_stride_b, p.q_stride_s, p.q_stride_h);
  strides(k, p.k_stride_b, p.k_stride_s, p.k_stride_h);
  strides(v, p.v_stride_b, p.v_stride_s, p.v_stride_h);
  p.q = q.data;
  p.k = k.data;
  p.v = v.data;
  p.heads_q = d.hq;
  p.heads_kv = d.hkv;
  p.head_dim = d.d;
  return d;
}

// cum_seqlens: 1-D int32 of N+1 entries, 0 first, non-decreasing, last = packed rows.
std::vector<int32_t> check_cum_seqlens(const TensorView& t, const char* name, int64_t total) {
  expect_rank(t, name, 1, "[num_sequences + 1]");
  expect_dtype(t, name, DType::i32);
  if (t.shape[0] < 2) bad(fmt::format("{}: needs at least 2 entries (one sequence), got {}", name, t.shape[0]));
  auto cu = read_i32(t, name);
  if (cu[0] != 0) bad(fmt::format("{}: must start at 0, got {}", name, cu[0]));
  for (size_t i = 1; i < cu.size(); ++i)
    if (cu[i] < cu[i - 1])
      bad(fmt::format("{}: must be non-decreasing, but entry {} ({}) < entry {} ({})", name, i,
                      cu[i], i - 1, cu[i - 1]));
  if (cu.back() != total)
    bad(fmt::format("{}: last entry must equal the packed length {}, got {}", name, total, cu.back()));
  return cu;
}

int64_t longest(const std::vector<int32_t>& cu) {
  int64_t m = 0;
  for (size_t i = 1; i < cu.size(); ++i) m = std::max<int64_t>(m, cu[i] - cu[i - 1]);
  return m;
}

void check_varlen(const FlashAttentionInputs& in, const Dims& d, FlashProblem& pb) {
  if (!in.cum_seqlens_k) bad("cum_seqlens_k: required when cum_seqlens_q is given");
  if (in.bias) bad("bias: not supported with varlen (cum_seqlens_q); pass per-sequence calls or segment ids");
  if (in.q_segment_ids || in.kv_segment_ids)
    bad("q_segment_ids: cannot be combined with cum_seqlens_q (both describe packing)");
  auto cq = check_cum_seqlens(*in.cum_seqlens_q, "cum_seqlens_q", d.sq);
  auto ck = check_cum_seqlens(*in.cum_seqlens_k, "cum_seqlens_k", d.sk);
  if (cq.size() != ck.size())
    bad(fmt::format("cum_seqlens_k: expected {} entries like cum_seqlens_q, got {}", cq.size(), ck.size()));
  // The kernels read them: they live where q does.
  expect_device(*in.cum_seqlens_q, "cum_seqlens_q", in.q.device);
  expect_device(*in.cum_seqlens_k, "cum_seqlens_k", in.q.device);
  auto& p = pb.params;
  p.cu_seqlens_q = static_cast<const i32*>(in.cum_seqlens_q->data);
  p.cu_seqlens_k = static_cast<const i32*>(in.cum_seqlens_k->data);
  if (in.cum_seqlens_q->strides[0] != 1 || in.cum_seqlens_k->strides[0] != 1)
    bad("cum_seqlens_q: must be contiguous");
  p.batch = static_cast<int64_t>(cq.size()) - 1;
  p.seqlen_q = longest(cq);
  p.seqlen_k = longest(ck);
  p.total_q = d.sq;  // the packed extents (the CUDA kernels' TMA bounds)
  p.total_k = d.sk;
}

void check_segments(const FlashAttentionInputs& in, const Dims& d, FlashProblem& pb) {
  if (!in.q_segment_ids || !in.kv_segment_ids)
    bad(std::string(in.q_segment_ids ? "kv_segment_ids" : "q_segment_ids") +
        ": q_segment_ids and kv_segment_ids must be given together");
  const TensorView &qs = *in.q_segment_ids, &ks = *in.kv_segment_ids;
  expect_rank(qs, "q_segment_ids", 2, "[B, Sq]");
  expect_rank(ks, "kv_segment_ids", 2, "[B, Sk]");
  expect_dtype(qs, "q_segment_ids", DType::i32);
  expect_dtype(ks, "kv_segment_ids", DType::i32);
  expect_dim(qs, "q_segment_ids", 0, d.batch, "batch");
  expect_dim(qs, "q_segment_ids", 1, d.sq, "Sq");
  expect_dim(ks, "kv_segment_ids", 0, d.batch, "batch");
  expect_dim(ks, "kv_segment_ids", 1, d.sk, "Sk");
  expect_inner_contiguous(qs, "q_segment_ids");
  expect_inner_contiguous(ks, "kv_segment_ids");
  expect_device(qs, "q_segment_ids", in.q.device);
  expect_device(ks, "kv_segment_ids", in.q.device);
  auto& p = pb.params;
  p.q_segment_ids = static_cast<const i32*>(qs.data);
  p.kv_segment_ids = static_cast<const i32*>(ks.data);
  p.q_seg_stride_b = qs.strides[0];
  p.kv_seg_stride_b = ks.strides[0];
  pb.segments = true;
}

void check_bias(const TensorView& b, const Dims& d, FlashProblem& pb) {
  expect_rank(b, "bias", 4, "[B|1, Hq|1, Sq, Sk]");
  expect_dtype(b, "bias", pb.dtype);
  expect_device(b, "bias", pb.device);
  if (b.shape[0] != d.batch && b.shape[0] != 1)
    bad(fmt::format("bias: dimension 0 must be {} (B) or 1, got shape {}", d.batch, shape_str(b.shape)));
  if (b.shape[1] != d.hq && b.shape[1] != 1)
    bad(fmt::format("bias: dimension 1 must be {} (Hq) or 1, got shape {}", d.hq, shape_str(b.shape)));
  expect_dim(b, "bias", 2, d.sq, "Sq");
  expect_dim(b, "bias", 3, d.sk, "Sk");
  expect_inner_contiguous(b, "bias");
  auto& p = pb.params;
  p.bias = b.data;
  p.bias_stride_b = b.shape[0] == 1 ? 0 : b.strides[0];
  p.bias_stride_h = b.shape[1] == 1 ? 0 : b.strides[1];
  p.bias_stride_q = b.strides[2];
  pb.bias = true;
}

void check_sinks(const TensorView& s, const Dims& d, FlashProblem& pb) {
  if (s.rank() != 1 && s.rank() != 2)
    bad(fmt::format("softmax_aux: expected shape [Hq] or [Hq, num_sinks] with Hq = {}, got {}", d.hq,
                    shape_str(s.shape)));
  if (!is_floating(s.dtype))
    bad(fmt::format("softmax_aux: expected a floating dtype, got {}", dtype_name(s.dtype)));
  expect_dim(s, "softmax_aux", 0, d.hq, "Hq");
  if (!s.is_contiguous()) bad("softmax_aux: must be contiguous");
  int64_t n = s.rank() == 2 ? s.shape[1] : 1;
  if (n < 1) bad("softmax_aux: needs at least one sink per head");
  // Sinks are tiny ([Hq, n]): converted to float32 on the host, uploaded by the backend.
  std::vector<unsigned char> bytes(static_cast<size_t>(s.numel()) * dtype_size(s.dtype));
  copy_to_host(s.device, s.data, bytes.data(), bytes.size());
  pb.sinks_f32.resize(d.hq * n);
  for (int64_t i = 0; i < d.hq * n; ++i) pb.sinks_f32[i] = read_float(bytes, s.dtype, i);
  pb.params.num_sinks = n;
  pb.sinks = true;
}

void check_options(const FlashAttentionOptions& opt, const Dims& d, FlashProblem& pb) {
  auto& p = pb.params;
  p.scale = opt.softmax_scale ? *opt.softmax_scale : 1.0f / std::sqrt(static_cast<float>(d.d));
  if (!std::isfinite(p.scale)) bad(fmt::format("softmax_scale: must be finite, got {}", p.scale));
  p.mask.causal = opt.causal;
  p.mask.window_left = kUnbounded;
  p.mask.window_right = kUnbounded;
  if (opt.sliding_window) {
    const auto& w = *opt.sliding_window;
    if (w.left < 0 || w.right < 0)
      bad(fmt::format("sliding_window: left and right must be >= 0, got ({}, {})", w.left, w.right));
    p.mask.window_left = w.left;
    p.mask.window_right = w.right;
    pb.window = true;
  }
  if (opt.logits_soft_cap) {
    float c = *opt.logits_soft_cap;
    if (!(c > 0) || !std::isfinite(c))
      bad(fmt::format("logits_soft_cap: must be a positive finite number, got {}", c));
    p.softcap = c;
    pb.softcap = true;
  }
  p.normalize_output = opt.normalize_output ? 1 : 0;
  if (opt.block_q < 0 || opt.block_k < 0)
    bad(fmt::format("block sizes must be positive, got block_q {} block_k {}", opt.block_q, opt.block_k));
}

}  // namespace

FlashProblem check_flash_inputs(const FlashAttentionInputs& in, const FlashAttentionOptions& opt) {
  FlashProblem pb;
  pb.varlen = in.cum_seqlens_q.has_value();
  if (!pb.varlen && in.cum_seqlens_k) bad("cum_seqlens_q: required when cum_seqlens_k is given");
  Dims d = check_qkv(in, pb.varlen, pb.params);
  pb.dtype = in.q.dtype;
  pb.device = in.q.device;
  auto& p = pb.params;
  if (pb.varlen) {
    check_varlen(in, d, pb);
  } else {
    p.batch = d.batch;
    p.seqlen_q = d.sq;
    p.seqlen_k = d.sk;
    if (in.q_segment_ids || in.kv_segment_ids) check_segments(in, d, pb);
    if (in.bias) check_bias(*in.bias, d, pb);
  }
  if (in.softmax_aux) check_sinks(*in.softmax_aux, d, pb);
  check_options(opt, d, pb);
  pb.out_shape = in.q.shape;
  pb.lse_shape = pb.varlen ? std::vector<int64_t>{1, d.hq, d.sq} : std::vector<int64_t>{d.batch, d.hq, d.sq};
  return pb;
}

void bind_flash_outputs(FlashProblem& pb, const TensorView& out, const TensorView& lse) {
  if (out.shape != pb.out_shape)
    bad(fmt::format("out: expected shape {} (q's shape), got {}", shape_str(pb.out_shape), shape_str(out.shape)));
  expect_dtype(out, "out", pb.dtype);
  expect_device(out, "out", pb.device);
  expect_inner_contiguous(out, "out");
  if (lse.shape != pb.lse_shape)
    bad(fmt::format("lse: expected shape {}, got {}", shape_str(pb.lse_shape), shape_str(lse.shape)));
  expect_dtype(lse, "lse", DType::f32);
  expect_device(lse, "lse", pb.device);
  expect_inner_contiguous(lse, "lse");
  auto& p = pb.params;
  p.out = out.data;
  bool packed3 = pb.varlen && out.rank() == 3;
  p.o_stride_b = packed3 ? 0 : out.strides[0];
  p.o_stride_s = out.strides[packed3 ? 0 : 1];
  p.o_stride_h = out.strides[packed3 ? 1 : 2];
  p.lse = static_cast<float*>(lse.data);
  p.lse_stride_b = pb.varlen ? 0 : lse.strides[0];
  p.lse_stride_h = lse.strides[1];
}

}  // namespace ejk::detail
