#include "ops/state_space_v1/ssm1_reference.h"

#include <cmath>
#include <string>
#include <vector>

#include "ejk/core/error.h"
#include "ejk/kernels/cpu/types.h"

namespace ejk {
namespace {

// Exact: bf16 and f16 widen to f32 without rounding, and f32 to double.
double read_elem(const Ssm1Tokens& t, int64_t s, int64_t i, int64_t c, DType dtype) {
  const int64_t at = ssm1_at(t, s, i) + c;
  const auto* bits = static_cast<const uint16_t*>(t.data);
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(t.data)[at];
    case DType::bf16: return cpu::to_f32<cpu::ElemKind::bf16>(bits[at]);
    case DType::f16: return cpu::to_f32<cpu::ElemKind::f16>(bits[at]);
    default: break;
  }
  throw InvalidArgument("reference_ssm1: dtype " + std::string(dtype_name(dtype)) +
                        " is not an element type of state_space_v1 (expected f32, bf16 or f16)");
}

double sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }

void run_sequence(const Ssm1Params& p, DType dtype, int64_t s, const Ssm1RefOut& out) {
  const int64_t Dm = p.dim, N = p.nstate, state = Dm * N;
  // Token n of the sequence is packed token first + n, in row (its index in a contiguous output).
  const TokenSpan sp = ssm1_span(p.cu_seqlens, p.seqlen, s);
  const int64_t S = sp.end - sp.begin, first = sp.begin, row0 = ssm1_row(p.cu_seqlens, p.seqlen, s, first);
  auto rd = [&](const Ssm1Tokens& t, int64_t i, int64_t c) { return read_elem(t, s, first + i, c, dtype); };
  // states[i] is h before token i; states[S] the final one.
  std::vector<double> states(size_t((S + 1) * state));
  for (int64_t e = 0; e < state; ++e) states[size_t(e)] = p.h0 ? p.h0[s * state + e] : 0.0;
  for (int64_t i = 0; i < S; ++i) {
    const double* prev = &states[size_t(i * state)];
    double* h = &states[size_t((i + 1) * state)];
    for (int64_t c = 0; c < Dm; ++c) {
      const double x = rd(p.x, i, c), dt = rd(p.dt, i, c);
      double y = double(p.D[c]) * x;
      for (int64_t j = 0; j < N; ++j) {
        h[c * N + j] = ssm1_update(prev[c * N + j], std::exp(double(p.A[c * N + j]) * dt), dt * x, rd(p.B, i, j));
        y += h[c * N + j] * rd(p.C, i, j);
      }
      if (p.gate.data) {
        const double g = rd(p.gate, i, c);
        y *= g * sigmoid(g);
      }
      if (out.y) out.y[(row0 + i) * Dm + c] = y;
    }
  }
  if (out.ht) for (int64_t e = 0; e < state; ++e) out.ht[s * state + e] = states[size_t(S * state + e)];
  if (!p.d_y.data) return;
  std::vector<double> dh(static_cast<size_t>(state));
  for (int64_t e = 0; e < state; ++e) dh[size_t(e)] = p.dht ? p.dht[s * state + e] : 0.0;
  for (int64_t i = S - 1; i >= 0; --i) {
    const double* prev = &states[size_t(i * state)];
    const double* h = &states[size_t((i + 1) * state)];
    std::vector<double> dB(size_t(N), 0.0), dC(size_t(N), 0.0);
    for (int64_t c = 0; c < Dm; ++c) {
      const double x = rd(p.x, i, c), dt = rd(p.dt, i, c), dout = rd(p.d_y, i, c);
      double gy = dout;
      if (p.gate.data) {
        double y = double(p.D[c]) * x;
        for (int64_t j = 0; j < N; ++j) y += h[c * N + j] * rd(p.C, i, j);
        const double g = rd(p.gate, i, c), sig = sigmoid(g);
        gy = dout * g * sig;
        if (out.dgate) out.dgate[(row0 + i) * Dm + c] = dout * y * ssm1_silu_grad(g, sig);
      }
      if (out.dD) out.dD[c] += gy * x;
      double dx = gy * double(p.D[c]), ddt = 0;
      for (int64_t j = 0; j < N; ++j) {
        const double A = p.A[c * N + j], a = std::exp(A * dt), b = rd(p.B, i, j);
        const double dj = dh[size_t(c * N + j)] + gy * rd(p.C, i, j);
        dC[size_t(j)] += gy * h[c * N + j];
        ddt += dj * (A * a * prev[c * N + j] + x * b);
        dx += dj * dt * b;
        if (out.dA) out.dA[c * N + j] += dj * a * dt * prev[c * N + j];
        dB[size_t(j)] += dj * dt * x;
        dh[size_t(c * N + j)] = dj * a;
      }
      if (out.dx) out.dx[(row0 + i) * Dm + c] = dx;
      if (out.ddt) out.ddt[(row0 + i) * Dm + c] = ddt;
    }
    for (int64_t j = 0; j < N; ++j) {
      if (out.dB) out.dB[(row0 + i) * N + j] = dB[size_t(j)];
      if (out.dC) out.dC[(row0 + i) * N + j] = dC[size_t(j)];
    }
  }
  if (out.dh0) for (int64_t e = 0; e < state; ++e) out.dh0[s * state + e] = dh[size_t(e)];
}

}  // namespace

void reference_ssm1(const Ssm1Params& p, DType dtype, const Ssm1RefOut& out) {
  // dA and dD sum over sequences.
  if (out.dA) for (int64_t e = 0; e < p.dim * p.nstate; ++e) out.dA[e] = 0;
  if (out.dD) for (int64_t e = 0; e < p.dim; ++e) out.dD[e] = 0;
  for (int64_t s = 0; s < p.batch; ++s) run_sequence(p, dtype, s, out);
}

}  // namespace ejk
