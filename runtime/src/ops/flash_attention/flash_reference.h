// The float64 reference of the flash attention forward, the yardstick of every kernel test.
// It reads the same FlashFwdParams the kernels get and decides visibility with mask.h's
// functions, so there is one definition of the mask semantics.
#pragma once
#include "ejk/dtype.h"
#include "ejk/kernels/common/flash_params.h"

namespace ejk {

// Computes out and lse in float64 with a plain two-pass softmax.
//  - Inputs q, k, v (and bias) are read as `dtype` bit patterns (f32, bf16 or f16) through the
//    strides in p; segment ids, cu_seqlens and softmax_aux through their pointers.
//  - Features are inferred from p: bias != null, softmax_aux != null (num_sinks per head),
//    softcap > 0, p.mask as given (causal bit and window bounds; kUnbounded = no limit),
//    segment ids when both pointers are set, varlen when cu_seqlens_q/k are set.
//  - out is contiguous in the output layout: [B, Sq, Hq, D], varlen [total_q, Hq, D].
//  - lse is contiguous: [B, Hq, Sq], varlen [Hq, total_q]. A row with no visible key and no
//    sink has out = 0 and lse = -inf.
//  - dropout (null: none): weights of the output multiplied by common/philox.h's factor; l and
//    lse do not see it.
// p.out and p.lse are not touched. Throws InvalidArgument for an unsupported dtype, missing
// pointers or inconsistent varlen arguments.
void reference_flash_fwd(const FlashFwdParams& p, DType dtype, double* out, double* lse,
                         const DropoutParams* dropout = nullptr);

}  // namespace ejk
