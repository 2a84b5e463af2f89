// The float64 reference of grouped_matmul and its backward: a loop over the groups, as
// kernels/ejk/kernels/common/grouped_matmul_params.h defines them, reading every tensor as
// double. Outputs are dense row-major in their spec layout.
#pragma once
#include "ejk/dtype.h"
#include "ejk/kernels/common/grouped_matmul_params.h"

namespace ejk {

struct GmmRefOut {
  double* out = nullptr;                     // forward [m, n]
  double* dlhs = nullptr;                    // backward [m, k]
  double* drhs = nullptr;                    // backward, rhs's layout ([G, k, n] or [G, n, k])
  bool drhs_transposed = false;
};

// dtypes: of lhs and rhs (the variant's), of existing_out and of d_out.
void reference_grouped_matmul(const GroupedMatmulParams& p, DType dtype, DType existing_dtype, DType d_out_dtype,
                              const GmmRefOut& r);

}  // namespace ejk
