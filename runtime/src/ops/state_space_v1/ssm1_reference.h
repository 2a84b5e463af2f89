// The float64 reference of state_space_v1 and its backward: per sequence and channel, the
// recurrence of common/ssm1_params.h in double, the backward over every token's saved state
// (small problems only: it keeps S * Dm * N doubles per sequence).
#pragma once
#include "ejk/dtype.h"
#include "ejk/kernels/common/ssm1_params.h"

namespace ejk {

struct Ssm1RefOut {
  double *y = nullptr, *ht = nullptr;  // forward
  double *dx = nullptr, *dA = nullptr, *dB = nullptr, *dC = nullptr, *dD = nullptr, *ddt = nullptr,
         *dgate = nullptr, *dh0 = nullptr;  // backward
};

// Inputs read as `dtype` through p's strides (gate/h0/d_y/dht where p has them). Outputs
// contiguous in their spec shapes; null outputs are skipped.
void reference_ssm1(const Ssm1Params& p, DType dtype, const Ssm1RefOut& out);

}  // namespace ejk
