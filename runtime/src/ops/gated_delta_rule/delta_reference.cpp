#include "ops/gated_delta_rule/delta_reference.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ejk/core/error.h"
#include "ejk/kernels/cpu/types.h"

namespace ejk {
namespace {

using Vec = std::vector<double>;

// Exact: bf16 and f16 widen to f32 without rounding, and f32 to double.
double read_elem(const void* base, int64_t index, DType dtype) {
  const auto* bits = static_cast<const uint16_t*>(base);
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(base)[index];
    case DType::bf16: return cpu::to_f32<cpu::ElemKind::bf16>(bits[index]);
    case DType::f16: return cpu::to_f32<cpu::ElemKind::f16>(bits[index]);
    default: break;
  }
  throw InvalidArgument("reference_delta: dtype " + std::string(dtype_name(dtype)) +
                        " is not an element type of the gated delta rule (expected f32, bf16 or f16)");
}

// One token's operands in double: q (normalized, scaled), k (normalized), v, beta, the decay.
struct Token {
  Vec q, qn, k, v, d_o;
  double q_inv = 1, k_inv = 1, beta = 0, a = 1;
  bool live = true, reset = false;
};

struct Unit {
  const DeltaParams& p;
  DType dtype;
  int64_t s, h, K, V;

  double at(const DeltaTokens& t, int64_t i, int64_t c) const { return read_elem(t.data, delta_at(t, s, i, h) + c, dtype); }
  static double normalize(Vec& x) {
    double ss = 0;
    for (double e : x) ss += e * e;
    const double inv = 1.0 / std::sqrt(ss + double(kDeltaNormEps));
    for (double& e : x) e *= inv;
    return inv;
  }
  Token load(int64_t i) const {
    Token x;
    x.q.resize(size_t(K)), x.k.resize(size_t(K)), x.v.resize(size_t(V)), x.d_o.assign(size_t(V), 0.0);
    for (int64_t r = 0; r < K; ++r) x.q[size_t(r)] = at(p.q, i, r), x.k[size_t(r)] = at(p.k, i, r);
    for (int64_t c = 0; c < V; ++c) {
      x.v[size_t(c)] = at(p.v, i, c);
      if (p.d_o.data) x.d_o[size_t(c)] = at(p.d_o, i, c);
    }
    if (p.l2norm) x.q_inv = normalize(x.q), x.k_inv = normalize(x.k);
    x.qn = x.q;
    for (double& e : x.q) e *= double(p.scale);
    x.beta = at(p.beta, i, 0);
    if (p.decay.data) {
      const double g = at(p.decay, i, 0), c = std::clamp(g, -double(kDeltaExpClamp), double(kDeltaExpClamp));
      x.live = c == g, x.a = std::exp(c);
    }
    x.reset = delta_resets(p, s, i);
    return x;
  }
  void store(double* out, int64_t i, int64_t X, const Vec& x) const {
    if (out) for (int64_t c = 0; c < X; ++c) out[((s * p.seqlen + i) * p.heads + h) * X + c] = x[size_t(c)];
  }
};

// u = P^T k and d = beta (v - u) of a token, P = a prev.
void step_terms(const Unit& u, const Token& x, const double* prev, Vec& P, Vec& uu, Vec& d) {
  const int64_t K = u.K, V = u.V;
  const double a = x.reset ? 0.0 : x.a;
  std::fill(uu.begin(), uu.end(), 0.0);
  for (int64_t r = 0; r < K; ++r)
    for (int64_t c = 0; c < V; ++c) {
      P[size_t(r * V + c)] = a * prev[r * V + c];
      uu[size_t(c)] += x.k[size_t(r)] * P[size_t(r * V + c)];
    }
  for (int64_t c = 0; c < V; ++c) d[size_t(c)] = x.beta * (x.v[size_t(c)] - uu[size_t(c)]);
}

void normalize_bwd(Vec& dy, const Vec& y, double inv) {
  double dot = 0;
  for (size_t c = 0; c < y.size(); ++c) dot += y[c] * dy[c];
  for (size_t c = 0; c < y.size(); ++c) dy[c] = inv * (dy[c] - y[c] * dot);
}

void run_unit(const Unit& u, const DeltaRefOut& out) {
  const DeltaParams& p = u.p;
  const int64_t K = u.K, V = u.V, KV = K * V, len = p.seqlen, state = delta_state_at(p, u.s, u.h);
  // states[n] is S before token n; states[len] the final one.
  Vec states(size_t((len + 1) * KV)), P(static_cast<size_t>(KV)), uu(static_cast<size_t>(V)), d(static_cast<size_t>(V));
  for (int64_t e = 0; e < KV; ++e) states[size_t(e)] = p.h0 ? p.h0[state + e] : 0.0;
  for (int64_t i = 0; i < len; ++i) {
    const Token x = u.load(i);
    step_terms(u, x, &states[size_t(i * KV)], P, uu, d);
    double* S = &states[size_t((i + 1) * KV)];
    Vec o(size_t(V), 0.0);
    for (int64_t r = 0; r < K; ++r)
      for (int64_t c = 0; c < V; ++c) {
        S[r * V + c] = delta_update(P[size_t(r * V + c)], x.k[size_t(r)], d[size_t(c)]);
        o[size_t(c)] += x.q[size_t(r)] * S[r * V + c];
      }
    u.store(out.o, i, V, o);
  }
  if (out.ht) for (int64_t e = 0; e < KV; ++e) out.ht[state + e] = states[size_t(len * KV + e)];
  if (!p.d_o.data) return;
  Vec D(static_cast<size_t>(KV));
  for (int64_t e = 0; e < KV; ++e) D[size_t(e)] = p.dht ? p.dht[state + e] : 0.0;
  for (int64_t i = len - 1; i >= 0; --i) {
    const Token x = u.load(i);
    const double* prev = &states[size_t(i * KV)];
    const double* S = &states[size_t((i + 1) * KV)];
    step_terms(u, x, prev, P, uu, d);
    Vec dq(size_t(K), 0.0), dk(size_t(K), 0.0), dd(size_t(V), 0.0), du(static_cast<size_t>(V)), dv(static_cast<size_t>(V));
    for (int64_t r = 0; r < K; ++r)
      for (int64_t c = 0; c < V; ++c) {
        double& Dr = D[size_t(r * V + c)];
        Dr += x.q[size_t(r)] * x.d_o[size_t(c)];
        dq[size_t(r)] += double(p.scale) * x.d_o[size_t(c)] * S[r * V + c];
        dd[size_t(c)] += x.k[size_t(r)] * Dr;
      }
    double dbeta = 0, dlog = 0;
    for (int64_t c = 0; c < V; ++c) {
      dbeta += dd[size_t(c)] * (x.v[size_t(c)] - uu[size_t(c)]);
      dv[size_t(c)] = x.beta * dd[size_t(c)], du[size_t(c)] = -x.beta * dd[size_t(c)];
    }
    const double a = x.reset ? 0.0 : x.a;
    for (int64_t r = 0; r < K; ++r)
      for (int64_t c = 0; c < V; ++c) {
        double& Dr = D[size_t(r * V + c)];
        const double pr = P[size_t(r * V + c)], dp = Dr + x.k[size_t(r)] * du[size_t(c)];
        dk[size_t(r)] += Dr * d[size_t(c)] + pr * du[size_t(c)];
        dlog += dp * pr;
        Dr = a * dp;
      }
    if (p.l2norm) normalize_bwd(dq, x.qn, x.q_inv), normalize_bwd(dk, x.k, x.k_inv);
    u.store(out.dq, i, K, dq), u.store(out.dk, i, K, dk), u.store(out.dv, i, V, dv);
    u.store(out.dbeta, i, 1, Vec{dbeta});
    u.store(out.ddecay, i, 1, Vec{x.live && !x.reset ? dlog : 0.0});
  }
  if (out.dh0) for (int64_t e = 0; e < KV; ++e) out.dh0[state + e] = D[size_t(e)];
}

}  // namespace

void reference_delta(const DeltaParams& p, DType dtype, const DeltaRefOut& out) {
  for (int64_t s = 0; s < p.sequences; ++s)
    for (int64_t h = 0; h < p.heads; ++h) run_unit(Unit{p, dtype, s, h, p.dk_, p.dv_}, out);
}

}  // namespace ejk
