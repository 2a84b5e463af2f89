// One attention problem for the standalone CPU kernel harness: shapes and features, fresh
// random inputs in the element type, FlashFwdParams pointing at them, and the thread runner.
#pragma once
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ejk/dtype.h"
#include "ejk/kernels/common/flash_params.h"
#include "ejk/kernels/cpu/types.h"

namespace ejk::bench {

using TaskFn = void (*)(const FlashFwdParams&, long long, long long);

struct Problem {
  std::string name;
  DType dtype = DType::f32;
  int64_t batch = 1, heads_q = 1, heads_kv = 1, seqlen_q = 1, seqlen_k = 1, head_dim = 64;
  std::vector<int64_t> varlen_q, varlen_k;  // per-sequence lengths (varlen mode when set)
  bool causal = false;
  bool window = false;
  int64_t window_left = 0, window_right = 0;
  float softcap = 0;          // > 0: softcap variant
  int64_t num_sinks = 0;      // > 0: sinks variant
  bool bias = false;
  bool bias_bcast_b = false, bias_bcast_h = false;
  bool segments = false;
  bool normalize = true;
  int64_t row_pad = 0;        // extra elements after each head of q/k/v (non-trivial strides)
  bool head_major = false;    // q/k/v stored [B, H, S, D] (torch's layout) and passed by strides
  float logit_scale = 1.0f;   // multiplies the default 1/sqrt(D) (large: exercises softcap)
};

// Element bits of the problem's dtype, from float.
inline uint16_t narrow(float x, DType dt) {
  return dt == DType::bf16 ? cpu::f32_to_bf16(x) : cpu::f32_to_f16(x);
}

// Inputs owned by the harness. Output buffers are poisoned with NaN before every run, so a
// row the kernel forgets to write fails the comparison.
class Inputs {
 public:
  Inputs(const Problem& pb, std::mt19937_64& rng) : pb_(pb) {
    const bool varlen = !pb.varlen_q.empty();
    int64_t batch = varlen ? int64_t(pb.varlen_q.size()) : pb.batch;
    int64_t sq = pb.seqlen_q, sk = pb.seqlen_k, total_q = batch * sq, total_k = batch * sk;
    if (varlen) {
      cu_q_.push_back(0);
      cu_k_.push_back(0);
      sq = sk = 0;
      for (size_t i = 0; i < pb.varlen_q.size(); ++i) {
        cu_q_.push_back(cu_q_.back() + int32_t(pb.varlen_q[i]));
        cu_k_.push_back(cu_k_.back() + int32_t(pb.varlen_k[i]));
        sq = std::max<int64_t>(sq, pb.varlen_q[i]);
        sk = std::max<int64_t>(sk, pb.varlen_k[i]);
      }
      total_q = cu_q_.back();
      total_k = cu_k_.back();
    }
    const int64_t D = pb.head_dim, hs = D + pb.row_pad;  // head stride of q/k/v
    std::normal_distribution<float> normal(0.0f, 1.0f);
    auto fill = [&](std::vector<uint8_t>& buf, int64_t n) {
      buf.resize(size_t(n) * dtype_size(pb.dtype));
      for (int64_t i = 0; i < n; ++i) store(buf, i, normal(rng));
    };
    fill(q_, total_q * pb.heads_q * hs);
    fill(k_, total_k * pb.heads_kv * hs);
    fill(v_, total_k * pb.heads_kv * hs);
    const int64_t bias_b = pb.bias_bcast_b ? 1 : batch, bias_h = pb.bias_bcast_h ? 1 : pb.heads_q;
    if (pb.bias) fill(bias_, bias_b * bias_h * sq * sk);
    for (int64_t i = 0; i < pb.heads_q * pb.num_sinks; ++i) sinks_.push_back(normal(rng));
    if (pb.segments) {
      q_seg_ = random_segments(batch, sq, rng);
      kv_seg_ = random_segments(batch, sk, rng);
    }
    out_.resize(size_t(total_q * pb.heads_q * D) * dtype_size(pb.dtype));
    lse_.resize(size_t(batch * pb.heads_q * sq));
    if (varlen) lse_.resize(size_t(pb.heads_q * total_q));

    FlashFwdParams& p = params_;
    p = FlashFwdParams{};
    p.q = q_.data(), p.k = k_.data(), p.v = v_.data(), p.out = out_.data(), p.lse = lse_.data();
    p.bias = pb.bias ? bias_.data() : nullptr;
    p.q_segment_ids = pb.segments ? q_seg_.data() : nullptr;
    p.kv_segment_ids = pb.segments ? kv_seg_.data() : nullptr;
    p.cu_seqlens_q = varlen ? cu_q_.data() : nullptr;
    p.cu_seqlens_k = varlen ? cu_k_.data() : nullptr;
    p.softmax_aux = pb.num_sinks ? sinks_.data() : nullptr;
    p.batch = batch, p.seqlen_q = sq, p.seqlen_k = sk;
    p.heads_q = pb.heads_q, p.heads_kv = pb.heads_kv, p.head_dim = D, p.num_sinks = pb.num_sinks;
    p.sinks_stride_h = pb.num_sinks;
    if (pb.head_major && !varlen) {
      p.q_stride_s = hs, p.q_stride_h = sq * hs, p.q_stride_b = pb.heads_q * sq * hs;
      p.k_stride_s = hs, p.k_stride_h = sk * hs, p.k_stride_b = pb.heads_kv * sk * hs;
      p.v_stride_s = hs, p.v_stride_h = sk * hs, p.v_stride_b = pb.heads_kv * sk * hs;
    } else {
      p.q_stride_h = hs, p.q_stride_s = pb.heads_q * hs, p.q_stride_b = sq * p.q_stride_s;
      p.k_stride_h = hs, p.k_stride_s = pb.heads_kv * hs, p.k_stride_b = sk * p.k_stride_s;
      p.v_stride_h = hs, p.v_stride_s = pb.heads_kv * hs, p.v_stride_b = sk * p.v_stride_s;
    }
    p.o_stride_h = D, p.o_stride_s = pb.heads_q * D, p.o_stride_b = sq * p.o_stride_s;
    p.lse_stride_h = varlen ? total_q : sq, p.lse_stride_b = varlen ? 0 : pb.heads_q * sq;
    p.bias_stride_q = sk, p.bias_stride_h = pb.bias_bcast_h ? 0 : sq * sk;
    p.bias_stride_b = pb.bias_bcast_b ? 0 : bias_h * sq * sk;
    p.q_seg_stride_b = sq, p.kv_seg_stride_b = sk;
    p.scale = pb.logit_scale / std::sqrt(float(D));
    p.softcap = pb.softcap;
    p.mask.causal = pb.causal;
    p.mask.window_left = pb.window ? pb.window_left : kUnbounded;
    p.mask.window_right = pb.window ? pb.window_right : kUnbounded;
    p.normalize_output = pb.normalize ? 1 : 0;
  }

  const FlashFwdParams& params() const { return params_; }
  int64_t out_elems() const { return int64_t(out_.size() / dtype_size(pb_.dtype)); }
  int64_t lse_elems() const { return int64_t(lse_.size()); }
  double out_at(int64_t i) const {
    if (pb_.dtype == DType::f32) return reinterpret_cast<const float*>(out_.data())[i];
    uint16_t bits = reinterpret_cast<const uint16_t*>(out_.data())[i];
    return pb_.dtype == DType::bf16 ? cpu::bf16_to_f32(bits) : cpu::f16_to_f32(bits);
  }
  double lse_at(int64_t i) const { return lse_[size_t(i)]; }

  void poison_outputs() {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const int64_t n = out_elems();
    for (int64_t i = 0; i < n; ++i) store(out_, i, nan);
    for (float& x : lse_) x = nan;
  }

 private:
  void store(std::vector<uint8_t>& buf, int64_t i, float x) const {
    if (pb_.dtype == DType::f32) reinterpret_cast<float*>(buf.data())[i] = x;
    else reinterpret_cast<uint16_t*>(buf.data())[i] = narrow(x, pb_.dtype);
  }
  // Runs of equal ids, with -1 (padding) at the end of some rows.
  static std::vector<int32_t> random_segments(int64_t batch, int64_t len, std::mt19937_64& rng) {
    std::vector<int32_t> ids(size_t(batch * len));
    std::uniform_int_distribution<int64_t> run(1, std::max<int64_t>(1, len / 2));
    for (int64_t b = 0; b < batch; ++b) {
      int32_t id = 0;
      int64_t pad_from = len - std::uniform_int_distribution<int64_t>(0, len / 4)(rng);
      for (int64_t s = 0; s < len;) {
        int64_t n = run(rng);
        for (int64_t j = 0; j < n && s < len; ++j, ++s) ids[size_t(b * len + s)] = s >= pad_from ? -1 : id;
        ++id;
      }
    }
    return ids;
  }

  Problem pb_;
  std::vector<uint8_t> q_, k_, v_, bias_, out_;
  std::vector<float> lse_, sinks_;
  std::vector<int32_t> q_seg_, kv_seg_, cu_q_, cu_k_;
  FlashFwdParams params_{};
};

// Runs every task of the problem on `threads` threads that take tasks one at a time from an
// atomic counter (dynamic scheduling, as the runtime's pool does).
inline void run_threaded(TaskFn fn, const FlashFwdParams& p, int block_q, int threads) {
  const int64_t n = flash_fwd_num_tasks(p, block_q);
  std::atomic<int64_t> next{0};
  auto worker = [&] {
    for (int64_t t; (t = next.fetch_add(1)) < n;) fn(p, t, t + 1);
  };
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
}

}  // namespace ejk::bench
