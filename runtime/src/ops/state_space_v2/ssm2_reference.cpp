#include "ops/state_space_v2/ssm2_reference.h"

#include <cmath>
#include <string>
#include <vector>

#include "ejk/core/error.h"
#include "ejk/kernels/cpu/types.h"

namespace ejk {
namespace {

// Exact: bf16 and f16 widen to f32 without rounding, and f32 to double.
double read_elem(const Ssm2Tokens& t, int64_t s, int64_t i, int64_t h, int64_t c, DType dtype) {
  const int64_t at = ssm2_at(t, s, i, h) + c;
  const auto* bits = static_cast<const uint16_t*>(t.data);
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(t.data)[at];
    case DType::bf16: return cpu::to_f32<cpu::ElemKind::bf16>(bits[at]);
    case DType::f16: return cpu::to_f32<cpu::ElemKind::f16>(bits[at]);
    default: break;
  }
  throw InvalidArgument("reference_ssm2: dtype " + std::string(dtype_name(dtype)) +
                        " is not an element type of state_space_v2 (expected f32, bf16 or f16)");
}

void run_sequence(const Ssm2Params& p, DType dtype, int64_t s, const Ssm2RefOut& out) {
  const int64_t H = p.heads, P = p.hdim, G = p.groups, N = p.nstate, state = H * P * N;
  // Token n of the sequence is packed token first + n, in row (its index in a contiguous output).
  const TokenSpan sp = ssm1_span(p.cu_seqlens, p.seqlen, s);
  const int64_t S = sp.end - sp.begin, first = sp.begin, row0 = ssm1_row(p.cu_seqlens, p.seqlen, s, first);
  auto rd = [&](const Ssm2Tokens& t, int64_t i, int64_t h, int64_t c) {
    return read_elem(t, s, first + i, h, c, dtype);
  };
  std::vector<double> states(size_t((S + 1) * state));  // states[i]: before token i
  for (int64_t e = 0; e < state; ++e) states[size_t(e)] = p.h0 ? p.h0[s * state + e] : 0.0;
  for (int64_t i = 0; i < S; ++i) {
    const double* prev = &states[size_t(i * state)];
    double* st = &states[size_t((i + 1) * state)];
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = ssm2_group(p, h);
      const double dt = rd(p.dt, i, h, 0), e = std::exp(double(p.A[h]) * dt);
      for (int64_t q = 0; q < P; ++q) {
        const double x = rd(p.x, i, h, q);
        double y = double(p.D[h]) * x;
        for (int64_t j = 0; j < N; ++j) {
          const int64_t at = (h * P + q) * N + j;
          st[at] = ssm1_update(prev[at], e, dt * x, rd(p.B, i, g, j));
          y += st[at] * rd(p.C, i, g, j);
        }
        if (out.y) out.y[((row0 + i) * H + h) * P + q] = y;
      }
    }
  }
  if (out.ht) for (int64_t e = 0; e < state; ++e) out.ht[s * state + e] = states[size_t(S * state + e)];
  if (!p.d_y.data) return;
  std::vector<double> dh(static_cast<size_t>(state));
  for (int64_t e = 0; e < state; ++e) dh[size_t(e)] = p.dht ? p.dht[s * state + e] : 0.0;
  for (int64_t i = S - 1; i >= 0; --i) {
    const double* prev = &states[size_t(i * state)];
    const double* st = &states[size_t((i + 1) * state)];
    std::vector<double> dB(size_t(G * N), 0.0), dC(size_t(G * N), 0.0);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = ssm2_group(p, h);
      const double A = p.A[h], dt = rd(p.dt, i, h, 0), e = std::exp(A * dt);
      double ddt = 0;
      for (int64_t q = 0; q < P; ++q) {
        const double x = rd(p.x, i, h, q), dy = rd(p.d_y, i, h, q);
        if (out.dD) out.dD[h] += dy * x;
        double dx = dy * double(p.D[h]);
        for (int64_t j = 0; j < N; ++j) {
          const int64_t at = (h * P + q) * N + j;
          const double b = rd(p.B, i, g, j), dj = dh[size_t(at)] + dy * rd(p.C, i, g, j);
          dC[size_t(g * N + j)] += dy * st[at];
          ddt += dj * (A * e * prev[at] + x * b);
          if (out.dA) out.dA[h] += dj * e * dt * prev[at];
          dx += dj * dt * b;
          dB[size_t(g * N + j)] += dj * dt * x;
          dh[size_t(at)] = dj * e;
        }
        if (out.dx) out.dx[((row0 + i) * H + h) * P + q] = dx;
      }
      if (out.ddt) out.ddt[(row0 + i) * H + h] = ddt;
    }
    for (int64_t e = 0; e < G * N; ++e) {
      if (out.dB) out.dB[(row0 + i) * G * N + e] = dB[size_t(e)];
      if (out.dC) out.dC[(row0 + i) * G * N + e] = dC[size_t(e)];
    }
  }
  if (out.dh0) for (int64_t e = 0; e < state; ++e) out.dh0[s * state + e] = dh[size_t(e)];
}

}  // namespace

void reference_ssm2(const Ssm2Params& p, DType dtype, const Ssm2RefOut& out) {
  // da and dd sum over sequences.
  if (out.dA) for (int64_t h = 0; h < p.heads; ++h) out.dA[h] = 0;
  if (out.dD) for (int64_t h = 0; h < p.heads; ++h) out.dD[h] = 0;
  for (int64_t s = 0; s < p.batch; ++s) run_sequence(p, dtype, s, out);
}

}  // namespace ejk
