"""The ops as PyTorch custom ops: torch.library.opcheck (schema, fake kernels, autograd
registration, AOT dispatch with static and dynamic shapes) for each, and torch.compile
(fullgraph=True) of each, forward and, for mean pooling, backward. CPU tensors; the CUDA ones are
in test_torch_cuda.py."""
import numpy as np
import pytest

import reference
from torch_support import assert_rel_l2, import_torch, no_cpu_jit, numpy64

torch = import_torch()
import ejk.torch  # noqa: E402
from ejk.torch import flash_attention, flash_attention_with_lse, mean_pooling, merge_attention_states  # noqa: E402

ops = torch.ops.ejk
# Masked CPU variants are compiled on first use: without the CPU JIT (a GPU machine without LLVM)
# test_torch_cuda.py covers opcheck and torch.compile.
pytestmark = pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")


def randn(rng, shape, dtype=torch.float32, requires_grad=False):
    return torch.from_numpy(rng.standard_normal(shape)).to(dtype).requires_grad_(requires_grad)


def flash_args(q, k, v, bias=None, q_seg=None, kv_seg=None, cu_q=None, cu_k=None, aux=None, mask=None, scale=None,
               causal=False, window=None, softcap=None, normalize=True, max_q=None, max_k=None):
    """The op's positional arguments (its schema has no defaults)."""
    return (q, k, v, bias, q_seg, kv_seg, cu_q, cu_k, aux, mask, scale, causal, window, softcap, normalize, max_q, max_k)


def flash_samples(rng):
    q, k, v = randn(rng, (2, 24, 4, 64)), randn(rng, (2, 40, 2, 64)), randn(rng, (2, 40, 2, 64))
    seg = torch.tensor([[0] * 12 + [1] * 12, [0] * 24], dtype=torch.int32)
    kv_seg = torch.tensor([[0] * 20 + [1] * 20, [0] * 40], dtype=torch.int32)
    packed = randn(rng, (30, 4, 64)), randn(rng, (50, 2, 64)), randn(rng, (50, 2, 64))
    cu_q, cu_k = torch.tensor([0, 10, 30], dtype=torch.int32), torch.tensor([0, 25, 50], dtype=torch.int32)
    return {
        "plain": flash_args(q, k, v),
        "causal_window_softcap_scale": flash_args(q, k, v, scale=0.2, causal=True, window=[8, 0], softcap=20.0),
        "bias_segments": flash_args(q, k, v, bias=randn(rng, (1, 4, 24, 40)), q_seg=seg, kv_seg=kv_seg),
        "sinks_unnormalized": flash_args(q, k, v, aux=randn(rng, (4, 2)), normalize=False),
        "varlen": flash_args(*packed, cu_q=cu_q, cu_k=cu_k, causal=True, max_q=20, max_k=25),
        "bfloat16": flash_args(*(x.to(torch.bfloat16) for x in (q, k, v)), causal=True),
        "dense_mask": flash_args(q, k, v, mask=torch.from_numpy(rng.random((2, 1, 24, 40)) < 0.5).to(torch.uint8),
                                 causal=True),
    }


SAMPLES = ["plain", "causal_window_softcap_scale", "bias_segments", "sinks_unnormalized", "varlen", "bfloat16"]


@pytest.mark.parametrize("sample", SAMPLES)
def test_opcheck_flash_attention(rng, sample):
    torch.library.opcheck(ops.flash_attention.default, flash_samples(rng)[sample])


@pytest.mark.parametrize("varlen", [False, True], ids=["dense", "varlen"])
def test_opcheck_mean_pooling_and_backward(rng, varlen):
    cu = torch.tensor([0, 5, 5, 24], dtype=torch.int32) if varlen else None
    x = randn(rng, (24, 32) if varlen else (3, 24, 32), requires_grad=True)
    torch.library.opcheck(ops.mean_pooling.default, (x, cu))
    g = randn(rng, (3, 32), requires_grad=True)
    torch.library.opcheck(ops.mean_pooling_backward.default, (g, cu, 24))


def test_opcheck_merge_attention_states(rng):
    out_a, out_b = randn(rng, (2, 20, 4, 64)), randn(rng, (2, 20, 4, 64))
    lse_a, lse_b = randn(rng, (2, 4, 20)), randn(rng, (2, 4, 20))
    lse_a[0, 0, 0] = lse_b[0, 0, 0] = -float("inf")
    torch.library.opcheck(ops.merge_attention_states.default, (out_a, lse_a, out_b, lse_b))


def test_fake_kernels_give_the_outputs_shapes_and_dtypes():
    with torch._subclasses.fake_tensor.FakeTensorMode():
        q, kv = torch.empty(2, 8, 4, 64, dtype=torch.bfloat16), torch.empty(2, 16, 2, 64, dtype=torch.bfloat16)
        out, lse = flash_attention_with_lse(q, kv, kv)
        assert out.shape == q.shape and out.dtype == torch.bfloat16
        assert lse.shape == (2, 4, 8) and lse.dtype == torch.float32
        cu = torch.empty(4, dtype=torch.int32)
        out, lse = flash_attention_with_lse(q[0], kv[0], kv[0], None, cu, cu)
        assert lse.shape == (1, 4, 8)
        assert mean_pooling(torch.empty(40, 16), cu).shape == (3, 16)
        assert ops.mean_pooling_backward(torch.empty(3, 16), None, 7).shape == (3, 7, 16)


# --- torch.compile -----------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield


def test_compiled_flash_attention(rng):
    q, k, v = randn(rng, (2, 48, 4, 64)), randn(rng, (2, 48, 2, 64)), randn(rng, (2, 48, 2, 64))

    @torch.compile(fullgraph=True)
    def attend(q, k, v):  # around the op, so inductor fuses and the op is an extern call
        out, lse = flash_attention_with_lse(q * 2.0, k, v, causal=True, sliding_window=(16, 0))
        return out + 1.0, lse

    out, lse = attend(q, k, v)
    ref_out, ref_lse = reference.flash_attention(numpy64(q) * 2.0, numpy64(k), numpy64(v), causal=True,
                                                 sliding_window=(16, 0))
    assert_rel_l2(out, ref_out + 1.0)
    assert_rel_l2(lse, ref_lse)


def test_compiled_mean_pooling_forward_and_backward(rng):
    x = randn(rng, (3, 20, 16), requires_grad=True)
    w = randn(rng, (3, 16))
    loss = torch.compile(lambda x, w: (mean_pooling(x) * w).sum(), fullgraph=True)
    loss(x, w).backward()
    assert_rel_l2(x.grad, np.broadcast_to(w.numpy()[:, None, :] / 20, x.shape))


def test_compiled_merge_attention_states(rng):
    out_a, out_b = randn(rng, (20, 4, 64)), randn(rng, (20, 4, 64))
    lse_a, lse_b = randn(rng, (4, 20)), randn(rng, (4, 20))
    out, lse = torch.compile(merge_attention_states, fullgraph=True)(out_a, lse_a, out_b, lse_b)
    ref_out, ref_lse = reference.merge_attention_states(out_a.numpy(), lse_a.numpy(), out_b.numpy(), lse_b.numpy())
    assert_rel_l2(out, ref_out)
    assert_rel_l2(lse, ref_lse)


def test_compiled_with_dynamic_shapes(rng):
    """One graph for several sequence lengths: the fake kernels take symbolic shapes."""
    attend = torch.compile(lambda q, k, v: flash_attention(q, k, v, causal=True), fullgraph=True, dynamic=True)
    for s in (16, 40):
        q, k, v = randn(rng, (1, s, 2, 64)), randn(rng, (1, s, 2, 64)), randn(rng, (1, s, 2, 64))
        assert_rel_l2(attend(q, k, v), reference.flash_attention(q.numpy(), k.numpy(), v.numpy(), causal=True)[0])


@pytest.mark.parametrize("varlen", [False, True])
def test_dynamic_shapes_trace_once(rng, varlen):
    """The fake kernels keep the inputs' symbolic sizes in the outputs' shapes (no
    specialization): a second sequence length reuses the graph."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    if varlen:
        pool = torch.compile(lambda x, cu: mean_pooling(x, cu), backend=backend, fullgraph=True, dynamic=True)
        for t in (12, 30):
            x, cu = randn(rng, (t, 16)), torch.tensor([0, 5, t], dtype=torch.int32)
            assert_rel_l2(pool(x, cu), reference.mean_pooling(x.numpy(), cu.numpy()))
    else:
        attend = torch.compile(lambda q, k: flash_attention_with_lse(q, k, k, causal=True)[1],
                               backend=backend, fullgraph=True, dynamic=True)
        for s, sk in ((16, 24), (40, 56)):
            q, k = randn(rng, (2, s, 2, 64)), randn(rng, (2, sk, 2, 64))
            lse = attend(q, k)
            assert lse.shape == (2, 2, s)
            assert_rel_l2(lse, reference.flash_attention(q.numpy(), k.numpy(), k.numpy(), causal=True)[1])
    assert len(graphs) == 1


def test_a_bad_call_fails_when_compiled_naming_the_argument(rng):
    """The fake kernel runs libejk's checks while the call is traced; Dynamo reports the
    ValueError inside its own TorchRuntimeError (as for any op's error while tracing)."""
    q, k = randn(rng, (1, 8, 2, 64)), randn(rng, (1, 8, 2, 32))
    with pytest.raises(RuntimeError, match="ValueError.*k: dim 3 \\(D\\) must be 64 as in q, got 32"):
        torch.compile(lambda q, k: flash_attention(q, k, k), fullgraph=True)(q, k)
