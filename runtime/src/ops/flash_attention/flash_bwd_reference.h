// The float64 reference of the flash attention backward: the gradient of the forward's float64
// reference (flash_reference.h), which tests check by finite differences of that forward.
#pragma once
#include "ejk/dtype.h"
#include "ejk/kernels/common/flash_bwd_params.h"

namespace ejk {

// Float64 gradients, each contiguous in its output's layout: dq like q ([B, Sq, Hq, D], varlen
// [total_q, Hq, D]), dk and dv like k, dbias like the bias tensor (its broadcast dims size 1;
// null: not wanted), dsoftmax_aux like softmax_aux (null: not wanted). Reads p.fwd as
// reference_flash_fwd does, p.d_out through its strides and p.d_lse (contiguous) when set; recomputes P from scratch (its own
// max and denominator; p.fwd.lse and out are not read) so a wrong lse or out from a kernel
// cannot hide in it. normalize_output must be 1.
struct FlashBwdReferenceOut {
  double *dq = nullptr, *dk = nullptr, *dv = nullptr, *dbias = nullptr, *dsoftmax_aux = nullptr;
};
// dropout (null: none): the forward's keep mask (common/philox.h), as flash_bwd_params.h applies it.
void reference_flash_bwd(const FlashBwdParams& p, DType dtype, const FlashBwdReferenceOut& out,
                         const DropoutParams* dropout = nullptr);

}  // namespace ejk
