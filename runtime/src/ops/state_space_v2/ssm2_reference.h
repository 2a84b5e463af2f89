// The float64 reference of state_space_v2 and its backward: per sequence, head and head dim the
// recurrence of common/ssm2_params.h in double, the backward over every token's saved state
// (small problems only: it keeps S * H * P * N doubles per sequence).
#pragma once
#include "ejk/dtype.h"
#include "ejk/kernels/common/ssm2_params.h"

namespace ejk {

struct Ssm2RefOut {
  double *y = nullptr, *ht = nullptr;  // forward
  double *dx = nullptr, *dA = nullptr, *dB = nullptr, *dC = nullptr, *dD = nullptr, *ddt = nullptr,
         *dh0 = nullptr;  // backward
};

// Inputs read as `dtype` through p's strides; outputs contiguous in their spec shapes; null
// outputs are skipped.
void reference_ssm2(const Ssm2Params& p, DType dtype, const Ssm2RefOut& out);

}  // namespace ejk
