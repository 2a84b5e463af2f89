"""ejk.torch.grouped_matmul on CPU tensors against the float64 per-group loop
(grouped_matmul_reference.py): empty groups, group_offset, transpose_rhs, existing_out,
bfloat16, preferred_element_type; autograd through grouped_matmul_backward; opcheck of both ops."""
import numpy as np
import pytest

import grouped_matmul_reference as ref
from torch_support import assert_rel_l2, import_torch, numpy64, poison

torch = import_torch()
from ejk.torch import grouped_matmul  # noqa: E402

SIZES = np.array([9, 0, 30, 17, 4, 3], np.int32)


@pytest.mark.parametrize("dtype,transpose,offset,existing,out_dtype", [
    (torch.float32, False, None, False, None),
    (torch.float32, True, 1, True, None),
    (torch.bfloat16, True, None, False, None),
    (torch.bfloat16, False, 2, True, torch.bfloat16),
])
def test_forward_and_autograd(rng, dtype, transpose, offset, existing, out_dtype):
    groups = 4
    lhs = torch.from_numpy(rng.standard_normal((64, 24))).to(dtype).requires_grad_()
    rhs = torch.from_numpy(rng.standard_normal((groups, 24, 40))).to(dtype)
    weights = (rhs.transpose(1, 2).contiguous() if transpose else rhs.clone()).requires_grad_()
    ex = torch.from_numpy(rng.standard_normal((64, 40))).float().requires_grad_() if existing else None
    sizes = torch.from_numpy(SIZES)
    go = None if offset is None else torch.tensor([offset], dtype=torch.int32)
    poison(torch, "cpu", (64, 40))
    out = grouped_matmul(lhs, weights, sizes, go, ex, transpose_rhs=transpose, preferred_element_type=out_dtype)
    assert out.dtype == (out_dtype or torch.float32)
    tol = "float32" if dtype == torch.float32 else "bfloat16"
    assert_rel_l2(out, ref.forward(numpy64(lhs), numpy64(rhs), SIZES, offset or 0, None if ex is None else numpy64(ex)), tol)
    d_out = rng.standard_normal((64, 40))
    (out.float() * torch.from_numpy(d_out).float()).sum().backward()
    want_lhs, want_rhs = ref.backward(numpy64(lhs), numpy64(rhs), SIZES, d_out, offset or 0)
    assert_rel_l2(lhs.grad, want_lhs, tol)
    assert_rel_l2(weights.grad, np.swapaxes(want_rhs, 1, 2) if transpose else want_rhs, tol)
    if ex is not None:
        assert_rel_l2(ex.grad, d_out, tol)


def test_opcheck(rng):
    lhs = torch.from_numpy(rng.standard_normal((20, 8))).float()
    rhs = torch.from_numpy(rng.standard_normal((3, 8, 5))).float()
    sizes = torch.tensor([6, 0, 10], dtype=torch.int32)
    ex = torch.from_numpy(rng.standard_normal((20, 5))).float()
    forward_args = (lhs.requires_grad_(), rhs.requires_grad_(), None, sizes, None, ex.requires_grad_())
    torch.library.opcheck(torch.ops.ejk.grouped_matmul.default, forward_args)
    d_out = torch.from_numpy(rng.standard_normal((20, 5))).float()
    torch.library.opcheck(torch.ops.ejk.grouped_matmul_backward.default,
                          (lhs.detach(), rhs.detach(), None, sizes, None, d_out))  # no second derivative
