"""ejk.torch's bad calls: ValueError with libejk's message naming the argument (from the op
itself, eagerly), NotImplementedError naming what ejkernel does not implement, and a clear error
on a backward through an op without a gradient."""
import re

import pytest

from torch_support import import_torch

torch = import_torch()
from ejk.torch import flash_attention, flash_attention_with_lse, mean_pooling, merge_attention_states  # noqa: E402


def zeros(*shape, dtype=torch.float32):
    return torch.zeros(shape, dtype=dtype)


@pytest.mark.parametrize("call, message", [
    (lambda: flash_attention(zeros(1, 8, 2, 64), zeros(1, 8, 2, 32), zeros(1, 8, 2, 32)),
     "k: dim 3 (D) must be 64 as in q, got 32"),
    (lambda: flash_attention(zeros(1, 8, 3, 64), zeros(1, 8, 2, 64), zeros(1, 8, 2, 64)),
     "k: number of kv heads (2) must divide the number of q heads (3)"),
    (lambda: flash_attention(zeros(1, 8, 2, 64), zeros(1, 8, 2, 64), zeros(1, 8, 2, 64, dtype=torch.bfloat16)), "v:"),
    (lambda: flash_attention(zeros(8, 64), zeros(8, 64), zeros(8, 64)), "q: expected rank 4 [B, Sq, Hq, D]"),
    (lambda: flash_attention(zeros(1, 8, 2, 64), zeros(1, 8, 2, 64), zeros(1, 8, 2, 64), sliding_window=(-1, 2)),
     "sliding_window"),
    (lambda: flash_attention(zeros(1, 8, 2, 64), zeros(1, 8, 2, 64), zeros(1, 8, 2, 64), sliding_window="wide"),
     "sliding_window"),
    (lambda: flash_attention_with_lse(zeros(1, 8, 2, 64), zeros(1, 8, 2, 64), zeros(1, 8, 2, 64),
                                      q_segment_ids=zeros(1, 8, dtype=torch.int32)), "kv_segment_ids"),
    (lambda: flash_attention(zeros(1, 8, 2, 64), zeros(1, 8, 2, 64), zeros(1, 8, 2, 64), None, None, None,
                             zeros(2, 2, 2)), "softmax_aux"),
    (lambda: flash_attention(zeros(8, 2, 64), zeros(8, 2, 64), zeros(8, 2, 64), None,
                             torch.tensor([0, 8]), torch.tensor([0, 8])), "cum_seqlens_q"),  # int64, not int32
    (lambda: flash_attention(zeros(1, 8, 2, 64, dtype=torch.complex64), zeros(1, 8, 2, 64), zeros(1, 8, 2, 64)),
     "q:"),
    (lambda: flash_attention([[1.0]], zeros(1, 8, 2, 64), zeros(1, 8, 2, 64)), "query: expected a torch.Tensor"),
    (lambda: mean_pooling(zeros(4, 8), torch.zeros(3)), "cu_seqlens"),
    (lambda: mean_pooling(zeros(4, 8)), "x: expected rank 3 [B, T, D]"),
    (lambda: merge_attention_states(zeros(2, 4, 8), zeros(4, 3), zeros(2, 4, 8), zeros(4, 2)), "lse_a"),
])
def test_bad_arguments_raise_value_error_naming_them(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


@pytest.mark.parametrize("kwargs, names", [
    (dict(mesh=object(), out_specs=object()), "mesh, out_specs are"),
    (dict(platform="pallas"), "platform: 'pallas'"),
])
def test_unsupported_options_raise_not_implemented(kwargs, names):
    q = zeros(1, 8, 2, 64)
    with pytest.raises(NotImplementedError, match=names):
        flash_attention(q, q, q, **kwargs)


def test_block_tables_read_pages_and_name_bad_ones():
    q = torch.randn(1, 8, 2, 64)
    pages = torch.randn(3, 4, 2, 64)
    tables = torch.tensor([[2, 0]], dtype=torch.int32)
    got = flash_attention(q, pages, pages, None, None, None, None, tables)
    dense = pages[tables.long()].reshape(1, 8, 2, 64)
    torch.testing.assert_close(got, flash_attention(q, dense, dense), rtol=0, atol=0)
    with pytest.raises(ValueError, match="key: with block_tables, expected a paged cache"):
        flash_attention(q, q[0], q[0], None, None, None, None, tables)


def test_platform_must_be_where_the_tensors_are():
    q = zeros(1, 8, 2, 64)
    with pytest.raises(ValueError, match="^platform: 'cuda' was asked for, but query is on cpu"):
        flash_attention(q, q, q, platform="triton")
    with pytest.raises(ValueError, match="^platform: 'cuda' was asked for"):
        mean_pooling(zeros(2, 4, 8), platform="cuda")
    assert flash_attention(q, q, q, platform="xla").shape == q.shape
    # Any precision, any float logits_dtype: the kernel is at least as precise.
    assert flash_attention(q, q, q, precision="HIGHEST", logits_dtype=torch.bfloat16).shape == q.shape


def test_backward_through_merge_says_there_is_no_gradient():
    out_a = torch.randn(8, 2, 64, requires_grad=True)
    lse = torch.randn(2, 8)
    out, _ = merge_attention_states(out_a, lse, out_a, lse)
    with pytest.raises(NotImplementedError, match="merge_attention_states"):
        out.sum().backward()


def test_forward_under_no_grad_needs_no_gradient():
    q = torch.randn(1, 128, 2, 64, requires_grad=True)
    with torch.no_grad():
        assert flash_attention(q, q, q).shape == q.shape
