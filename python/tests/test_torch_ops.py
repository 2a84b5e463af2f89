"""ejk.torch on CPU tensors, eagerly, against the float64 reference: flash attention's masks,
soft-capping, sinks, GQA, bias, segment ids, packed varlen, bfloat16, strided inputs and a
head_dim outside the built-in set (JIT); mean pooling with its first and second gradients;
merge_attention_states."""
import numpy as np
import pytest

import reference
from torch_support import assert_rel_l2, import_torch, no_cpu_jit, numpy64, poison

torch = import_torch()
from ejk.torch import flash_attention, flash_attention_with_lse, mean_pooling, merge_attention_states  # noqa: E402

# The CPU's built-in set has the plain variants; masks, soft-capping and sinks are compiled on
# first use, which needs the CPU JIT (LLVM 19: a GPU machine without it runs the CUDA tests only).
pytestmark = pytest.mark.skipif(bool(no_cpu_jit()), reason=f"CPU variants outside the built-in set: {no_cpu_jit()}")


def randn(rng, shape, dtype=torch.float32):
    return torch.from_numpy(rng.standard_normal(shape)).to(dtype)


def qkv(rng, b=2, sq=70, sk=90, hq=4, hkv=2, d=64, dtype=torch.float32):
    return [randn(rng, s, dtype) for s in ((b, sq, hq, d), (b, sk, hkv, d), (b, sk, hkv, d))]


def run(q, k, v, *optional, **opts):
    """flash_attention with out and lse, its output memory poisoned first."""
    b, sq, hq = (1, q.shape[-3], q.shape[-2]) if q.dim() == 3 else q.shape[:3]
    poison(torch, q.device, q.shape, (b, hq, sq))
    return flash_attention_with_lse(q, k, v, *optional, **opts)


def expect(q, k, v, **opts):
    return reference.flash_attention(*(numpy64(x) for x in (q, k, v)), **opts)


CASES = {
    "plain": {},
    "causal": dict(causal=True),
    "window": dict(sliding_window=(16, 8)),
    "window_int": dict(sliding_window=12),
    "causal_window_softcap": dict(causal=True, sliding_window=(20, 0), logits_soft_cap=5.0),
    "scale_unnormalized": dict(softmax_scale=0.3, normalize_output=False),
}


@pytest.mark.parametrize("name", CASES)
def test_masks_and_logits(rng, name):
    q, k, v = qkv(rng)
    out, lse = run(q, k, v, **CASES[name])
    ref_out, ref_lse = expect(q, k, v, **CASES[name])
    assert out.shape == q.shape and out.dtype == q.dtype and lse.dtype == torch.float32
    assert_rel_l2(out, ref_out)
    assert_rel_l2(lse, ref_lse)


@pytest.mark.parametrize("per_head", [False, True], ids=["sinks_shared", "sinks_per_head"])
def test_sinks(rng, per_head):
    q, k, v = qkv(rng, hq=4, hkv=1)  # MQA too
    sinks = randn(rng, (4, 3) if per_head else (3,))
    out, lse = run(q, k, v, None, None, None, sinks, causal=True)
    ref_out, ref_lse = reference.flash_attention(*(numpy64(x) for x in (q, k, v)), softmax_aux=numpy64(sinks),
                                                 causal=True)
    assert_rel_l2(out, ref_out)
    assert_rel_l2(lse, ref_lse)


def test_bias_and_segments(rng):
    q, k, v = qkv(rng, sq=64, sk=64)
    bias = randn(rng, (1, 4, 64, 64))
    seg = torch.tensor(np.repeat([[0, 1, 1, -1]], 16, axis=1).repeat(2, axis=0), dtype=torch.int32)
    out, lse = run(q, k, v, bias, q_segment_ids=seg, kv_segment_ids=seg)  # padding rows (-1) see no key: lse -inf
    ref_out, ref_lse = reference.flash_attention(*(numpy64(x) for x in (q, k, v)), bias=numpy64(bias),
                                                 q_segment_ids=seg.numpy(), kv_segment_ids=seg.numpy())
    assert np.isneginf(ref_lse).any()
    assert_rel_l2(out, ref_out)
    assert_rel_l2(lse, ref_lse)


@pytest.mark.parametrize("leading_one", [False, True], ids=["tq_hq_d", "1_tq_hq_d"])
def test_varlen(rng, leading_one):
    cu_q, cu_k = torch.tensor([0, 17, 17, 60], dtype=torch.int32), torch.tensor([0, 30, 41, 100], dtype=torch.int32)
    q = randn(rng, (60, 4, 64))
    k, v = randn(rng, (100, 2, 64)), randn(rng, (100, 2, 64))
    args = [x[None] if leading_one else x for x in (q, k, v)]
    out, lse = run(*args, None, cu_q, cu_k, causal=True, logits_soft_cap=10.0)
    ref_out, ref_lse = reference.flash_attention(*(numpy64(x) for x in (q, k, v)), cum_seqlens_q=cu_q.numpy(),
                                                 cum_seqlens_k=cu_k.numpy(), causal=True, logits_soft_cap=10.0)
    assert_rel_l2(out.reshape(q.shape), ref_out)
    assert_rel_l2(lse, ref_lse)


def test_bfloat16(rng):
    q, k, v = qkv(rng, dtype=torch.bfloat16, d=128)
    out, lse = run(q, k, v, causal=True)
    assert out.dtype == torch.bfloat16
    ref_out, ref_lse = expect(q, k, v, causal=True)
    assert_rel_l2(out, ref_out, "bfloat16")
    assert_rel_l2(lse, ref_lse, "bfloat16")


def test_strided_inputs(rng):
    """[B, H, S, D] transposed to [B, S, H, D] runs as it is; a last dim that is not unit-stride
    is copied first, as torch's own ops do."""
    q = randn(rng, (2, 4, 40, 64)).transpose(1, 2)
    k = randn(rng, (2, 2, 64, 50)).permute(0, 3, 1, 2)  # [B, Sk, Hkv, D] with D strided
    v = randn(rng, (2, 50, 2, 64))
    out, lse = run(q, k, v, causal=True)
    assert out.is_contiguous()
    ref_out, ref_lse = expect(q, k, v, causal=True)
    assert_rel_l2(out, ref_out)
    assert_rel_l2(lse, ref_lse)


def test_new_head_dim_compiles(rng):
    q, k, v = qkv(rng, d=80, hq=2, hkv=2)
    out, lse = run(q, k, v, sliding_window=(32, 32))
    assert_rel_l2(out, expect(q, k, v, sliding_window=(32, 32))[0])


def test_seed_call_form(rng):
    """Positional tensors, keyword options and the defaults of ejkernel.modules.flash_attention."""
    q, k, v = qkv(rng)
    out = flash_attention(q, k, v, None, None, None, None, None, mask_info=None, softmax_scale=None,
                          dropout_prob=0.0, causal=False, dropout_seed=None, sliding_window=None, logits_soft_cap=None,
                          normalize_output=True, precision=None, logits_dtype=torch.float32, platform="auto", cfg=None,
                          mesh=None, in_specs=None, out_specs=None)
    assert out.shape == q.shape
    assert_rel_l2(out, expect(q, k, v)[0])


# --- mean pooling ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_mean_pooling_dense(rng, dtype):
    x = randn(rng, (3, 50, 96), dtype)
    poison(torch, "cpu", (3, 96))
    out = mean_pooling(x)
    assert out.shape == (3, 96) and out.dtype == dtype
    assert_rel_l2(out, reference.mean_pooling(numpy64(x)), str(dtype).removeprefix("torch."))


def test_mean_pooling_varlen_and_empty_sequence(rng):
    x = randn(rng, (40, 32))
    cu = torch.tensor([0, 7, 7, 40], dtype=torch.int32)
    poison(torch, "cpu", (3, 32))
    out = mean_pooling(x, cu)
    assert_rel_l2(out, reference.mean_pooling(x.numpy(), cu.numpy()))
    assert (out[1] == 0).all()


def test_mean_pooling_gradient_is_g_over_length(rng):
    x = randn(rng, (2, 10, 16)).requires_grad_()
    w = randn(rng, (2, 16))
    (mean_pooling(x) * w).sum().backward()
    assert_rel_l2(x.grad, np.broadcast_to(w.numpy()[:, None, :] / 10, x.shape))
    packed = randn(rng, (10, 16)).requires_grad_()
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    (mean_pooling(packed, cu) * w).sum().backward()
    want = np.concatenate([np.broadcast_to(w.numpy()[0] / 4, (4, 16)), np.broadcast_to(w.numpy()[1] / 6, (6, 16))])
    assert_rel_l2(packed.grad, want)


def test_mean_pooling_second_gradient_is_the_mean_again(rng):
    x = randn(rng, (2, 10, 16)).requires_grad_()
    g = randn(rng, (2, 16)).requires_grad_()
    (dx,) = torch.autograd.grad(mean_pooling(x), x, g, create_graph=True)
    w = randn(rng, (2, 10, 16))
    (dg,) = torch.autograd.grad(dx, g, w)
    assert_rel_l2(dg, reference.mean_pooling(w.numpy()))


# --- merge attention states --------------------------------------------------------------------

def test_merge_attention_states(rng):
    out_a, out_b = randn(rng, (2, 30, 4, 64)), randn(rng, (2, 30, 4, 64))
    lse_a, lse_b = randn(rng, (2, 4, 30)), randn(rng, (2, 4, 30))
    lse_a[0, 1, 3] = lse_a[1, 2, 5] = -float("inf")
    lse_b[1, 2, 5] = -float("inf")  # both -inf: out 0, lse -inf
    poison(torch, "cpu", out_a.shape, lse_a.shape)
    out, lse = merge_attention_states(out_a, lse_a, out_b, lse_b)
    ref_out, ref_lse = reference.merge_attention_states(out_a.numpy(), lse_a.numpy(), out_b.numpy(), lse_b.numpy())
    assert_rel_l2(out, ref_out)
    assert_rel_l2(lse, ref_lse)


def test_merging_split_kv_halves_is_attention_over_all_keys(rng):
    q = randn(rng, (1, 40, 2, 64))
    k, v = randn(rng, (1, 80, 2, 64)), randn(rng, (1, 80, 2, 64))
    a = flash_attention_with_lse(q, k[:, :50], v[:, :50])
    b = flash_attention_with_lse(q, k[:, 50:], v[:, 50:])
    out, _ = merge_attention_states(a[0], a[1], b[0], b[1])
    assert_rel_l2(out, expect(q, k, v)[0])
