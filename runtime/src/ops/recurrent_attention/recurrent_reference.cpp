#include "ops/recurrent_attention/recurrent_reference.h"

#include <cmath>
#include <string>
#include <vector>

#include "ejk/core/error.h"
#include "ejk/kernels/cpu/types.h"

namespace ejk {
namespace {

// Exact: bf16 and f16 widen to f32 without rounding, and f32 to double.
double read_elem(const void* base, int64_t index, DType dtype) {
  const auto* bits = static_cast<const uint16_t*>(base);
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(base)[index];
    case DType::bf16: return cpu::to_f32<cpu::ElemKind::bf16>(bits[index]);
    case DType::f16: return cpu::to_f32<cpu::ElemKind::f16>(bits[index]);
    default: break;
  }
  throw InvalidArgument("reference_recurrent: dtype " + std::string(dtype_name(dtype)) +
                        " is not an element type of recurrent attention (expected f32, bf16 or f16)");
}

// One (sequence, head): its tokens' operands in double and its states.
struct Unit {
  const RecurrentParams& p;
  DType dtype;
  int64_t s, h, K, V;
  RecurrentSpan sp;

  double at(const RecurrentTokens& t, int64_t i, int64_t c) const {
    return read_elem(t.data, recurrent_at(p, t, s, i, h) + c, dtype);
  }
  int64_t token(int64_t n) const { return recurrent_token(sp, n, p.reverse != 0); }
  // Row decays (K) and column decays (V) of token i.
  void decays(int64_t i, std::vector<double>& a, std::vector<double>& b) const {
    for (int64_t r = 0; r < K; ++r) {
      double log = p.g_gamma ? double(p.g_gamma[h]) : 0.0;
      if (p.gh.data) log += at(p.gh, i, 0);
      if (p.g.data) log += at(p.g, i, r);
      if (p.gk.data) log += at(p.gk, i, r);
      a[size_t(r)] = std::exp(log);
    }
    for (int64_t c = 0; c < V; ++c) b[size_t(c)] = p.gv.data ? std::exp(at(p.gv, i, c)) : 1.0;
  }
  void store_tokens(double* out, int64_t i, int64_t X, const std::vector<double>& x) const {
    if (out) for (int64_t c = 0; c < X; ++c) out[(i * p.heads + h) * X + c] = x[size_t(c)];
  }
};

void run_unit(const Unit& u, const RecurrentRefOut& out) {
  const RecurrentParams& p = u.p;
  const int64_t K = u.K, V = u.V, KV = K * V, len = u.sp.end - u.sp.begin, state = recurrent_state_at(p, u.s, u.h);
  // states[n] is S before step n; states[len] the final one.
  std::vector<double> states(static_cast<size_t>((len + 1) * KV)), a(static_cast<size_t>(K)), b(static_cast<size_t>(V));
  for (int64_t e = 0; e < KV; ++e) states[size_t(e)] = p.h0 ? p.h0[state + e] : 0.0;
  for (int64_t n = 0; n < len; ++n) {
    const int64_t i = u.token(n);
    u.decays(i, a, b);
    const double* prev = &states[size_t(n * KV)];
    double* S = &states[size_t((n + 1) * KV)];
    for (int64_t r = 0; r < K; ++r)
      for (int64_t c = 0; c < V; ++c)
        S[r * V + c] = recurrent_update(prev[r * V + c], a[size_t(r)], b[size_t(c)], u.at(p.k, i, r), u.at(p.v, i, c));
    std::vector<double> o(static_cast<size_t>(V), 0.0);
    for (int64_t c = 0; c < V; ++c)
      for (int64_t r = 0; r < K; ++r) o[size_t(c)] += double(p.scale) * u.at(p.q, i, r) * S[r * V + c];
    u.store_tokens(out.o, i, V, o);
  }
  if (out.ht) for (int64_t e = 0; e < KV; ++e) out.ht[state + e] = states[size_t(len * KV + e)];
  if (!p.d_o.data) return;
  std::vector<double> D(static_cast<size_t>(KV));
  for (int64_t e = 0; e < KV; ++e) D[size_t(e)] = p.dht ? p.dht[state + e] : 0.0;
  std::vector<double> dq(static_cast<size_t>(K)), dk(dq), dlr(dq), dv(static_cast<size_t>(V)), dlc(dv);
  for (int64_t n = len - 1; n >= 0; --n) {
    const int64_t i = u.token(n);
    u.decays(i, a, b);
    const double* prev = &states[size_t(n * KV)];
    const double* S = &states[size_t((n + 1) * KV)];
    std::fill(dv.begin(), dv.end(), 0.0), std::fill(dlc.begin(), dlc.end(), 0.0);
    for (int64_t r = 0; r < K; ++r) {
      dq[size_t(r)] = dk[size_t(r)] = dlr[size_t(r)] = 0;
      const double qs = double(p.scale) * u.at(p.q, i, r), kr = u.at(p.k, i, r);
      for (int64_t c = 0; c < V; ++c) {
        const double d_o = u.at(p.d_o, i, c);
        double& d = D[size_t(r * V + c)];
        d += qs * d_o;
        const double prior = prev[r * V + c] * a[size_t(r)] * b[size_t(c)];
        dq[size_t(r)] += double(p.scale) * d_o * S[r * V + c];
        dk[size_t(r)] += d * u.at(p.v, i, c);
        dv[size_t(c)] += d * kr;
        dlr[size_t(r)] += d * prior;
        dlc[size_t(c)] += d * prior;
        d = recurrent_carry(d, a[size_t(r)], b[size_t(c)]);
      }
    }
    u.store_tokens(out.dq, i, K, dq), u.store_tokens(out.dk, i, K, dk), u.store_tokens(out.dv, i, V, dv);
    u.store_tokens(out.dg, i, K, dlr), u.store_tokens(out.dgk, i, K, dlr), u.store_tokens(out.dgv, i, V, dlc);
  }
  if (out.dh0) for (int64_t e = 0; e < KV; ++e) out.dh0[state + e] = D[size_t(e)];
}

}  // namespace

void reference_recurrent(const RecurrentParams& p, DType dtype, const RecurrentRefOut& out) {
  for (int64_t s = 0; s < p.sequences; ++s)
    for (int64_t h = 0; h < p.heads; ++h) run_unit(Unit{p, dtype, s, h, p.dk_, p.dv_, recurrent_span(p, s)}, out);
}

}  // namespace ejk
