// The float64 reference of the gated delta rule and its backward: per sequence and head, the
// recurrence of common/delta_params.h in double, the backward over every step's saved state
// (small problems only: it keeps T * K * V doubles per sequence and head).
#pragma once
#include "ejk/dtype.h"
#include "ejk/kernels/common/delta_params.h"

namespace ejk {

struct DeltaRefOut {
  double *o = nullptr, *ht = nullptr;  // forward
  double *dq = nullptr, *dk = nullptr, *dv = nullptr, *dbeta = nullptr, *ddecay = nullptr, *dh0 = nullptr;  // backward
};

// Inputs read as `dtype` through p's strides. Outputs contiguous: tokens as
// ((s * T + t) * H + h) * X + c, states as [B, H, K, V]; null outputs are skipped.
void reference_delta(const DeltaParams& p, DType dtype, const DeltaRefOut& out);

}  // namespace ejk
