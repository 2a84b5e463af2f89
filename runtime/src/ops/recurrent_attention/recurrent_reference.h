// The float64 reference of recurrent attention and its backward: per sequence and head, the
// recurrence of common/recurrent_params.h in double, the backward over every step's saved state
// (small problems only: it keeps len * K * V doubles per sequence and head).
#pragma once
#include "ejk/dtype.h"
#include "ejk/kernels/common/recurrent_params.h"

namespace ejk {

struct RecurrentRefOut {
  double *o = nullptr, *ht = nullptr;                                       // forward
  double *dq = nullptr, *dk = nullptr, *dv = nullptr, *dg = nullptr, *dgk = nullptr, *dgv = nullptr,
         *dh0 = nullptr;                                                    // backward
};

// Inputs read as `dtype` through p's strides (g/gk/gv/g_gamma/h0/d_o/dht where p has them).
// Outputs contiguous: tokens as (i * H + h) * X + c with i the packed token index, states as
// their [sequences, H, K, V] layout; null outputs are skipped.
void reference_recurrent(const RecurrentParams& p, DType dtype, const RecurrentRefOut& out);

}  // namespace ejk
