"""ejk.torch on CUDA tensors against the float64 reference (outputs poisoned first): flash
attention's masks, GQA, varlen and a head_dim compiled by NVRTC; mean pooling with its gradient;
merge_attention_states. The ops run on torch's current stream: on a side stream, and captured
into a CUDA graph (a launch on any other stream would break the capture). opcheck and
torch.compile on the GPU. Skipped, saying why, where torch has no CUDA device."""
import numpy as np
import pytest

import reference
from torch_support import assert_rel_l2, import_torch, numpy64, poison

torch = import_torch()
from ejk.torch import flash_attention, flash_attention_with_lse, mean_pooling, merge_attention_states  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device for torch "
                                f"(torch {torch.__version__}, CUDA {torch.version.cuda})")
GPU = "cuda"


def on_gpu(rng, shape, dtype=torch.bfloat16, device=GPU):
    return torch.from_numpy(rng.standard_normal(shape)).to(device=device, dtype=dtype)


def run(q, k, v, *optional, **opts):
    b, sq, hq = (1, q.shape[-3], q.shape[-2]) if q.dim() == 3 else q.shape[:3]
    poison(torch, q.device, q.shape, (b, hq, sq))
    return flash_attention_with_lse(q, k, v, *optional, **opts)


def expect(q, k, v, **opts):
    return reference.flash_attention(*(numpy64(x) for x in (q, k, v)), **opts)


CASES = {
    "plain": dict(),
    "causal": dict(causal=True),
    "window": dict(sliding_window=(64, 32)),
    "causal_softcap_scale": dict(causal=True, logits_soft_cap=20.0, softmax_scale=0.1),
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
@pytest.mark.parametrize("name", CASES)
def test_flash_attention(rng, name, dtype):
    q, k, v = on_gpu(rng, (2, 200, 8, 128), dtype), on_gpu(rng, (2, 300, 2, 128), dtype), on_gpu(rng, (2, 300, 2, 128), dtype)
    out, lse = run(q, k, v, **CASES[name])
    ref_out, ref_lse = expect(q, k, v, **CASES[name])
    dtype_name = str(dtype).removeprefix("torch.")
    assert out.device == q.device and out.dtype == dtype
    assert_rel_l2(out, ref_out, dtype_name)
    assert_rel_l2(lse, ref_lse, dtype_name)


def test_float32_on_cuda_is_a_value_error(rng):
    q = on_gpu(rng, (1, 64, 2, 64), torch.float32)
    with pytest.raises(ValueError, match="dtype = f32 is outside the cuda domain"):
        flash_attention(q, q, q)


def test_varlen_sinks_and_segments(rng):
    cu_q = torch.tensor([0, 100, 100, 333], dtype=torch.int32, device=GPU)
    cu_k = torch.tensor([0, 150, 170, 400], dtype=torch.int32, device=GPU)
    q, k, v = on_gpu(rng, (333, 4, 64)), on_gpu(rng, (400, 2, 64)), on_gpu(rng, (400, 2, 64))
    out, lse = run(q, k, v, None, cu_q, cu_k, causal=True)
    ref_out, ref_lse = expect(q, k, v, cum_seqlens_q=cu_q.cpu().numpy(), cum_seqlens_k=cu_k.cpu().numpy(), causal=True)
    assert_rel_l2(out, ref_out, "bfloat16")
    assert_rel_l2(lse, ref_lse, "bfloat16")
    q, k, v = on_gpu(rng, (2, 128, 4, 64)), on_gpu(rng, (2, 128, 4, 64)), on_gpu(rng, (2, 128, 4, 64))
    seg = torch.tensor(np.repeat([[0, 1, 1, -1]], 32, axis=1).repeat(2, axis=0), dtype=torch.int32, device=GPU)
    sinks = on_gpu(rng, (4, 2), torch.float32)
    out, lse = run(q, k, v, None, None, seg, seg, None, None, sinks)
    ref_out, ref_lse = expect(q, k, v, q_segment_ids=seg.cpu().numpy(), kv_segment_ids=seg.cpu().numpy(),
                              softmax_aux=sinks.cpu().numpy())
    assert_rel_l2(out, ref_out, "bfloat16")
    assert_rel_l2(lse, ref_lse, "bfloat16")


def test_new_head_dim_compiles_with_nvrtc(rng):
    q, k, v = (on_gpu(rng, (1, 96, 2, 80)) for _ in range(3))
    out, _ = run(q, k, v, causal=True)
    assert_rel_l2(out, expect(q, k, v, causal=True)[0], "bfloat16")


def test_mean_pooling_and_gradient(rng):
    x = on_gpu(rng, (4, 500, 256)).requires_grad_()
    poison(torch, GPU, (4, 256))
    out = mean_pooling(x)
    assert_rel_l2(out, reference.mean_pooling(numpy64(x)), "bfloat16")
    w = on_gpu(rng, (4, 256), torch.float32)
    (out.float() * w).sum().backward()
    assert_rel_l2(x.grad, np.broadcast_to(numpy64(w)[:, None, :] / 500, x.shape), "bfloat16")
    cu = torch.tensor([0, 0, 120, 500], dtype=torch.int32, device=GPU)  # an empty sequence: zeros
    packed = on_gpu(rng, (500, 256))
    poison(torch, GPU, (3, 256))
    assert_rel_l2(mean_pooling(packed, cu), reference.mean_pooling(numpy64(packed), cu.cpu().numpy()), "bfloat16")


def test_merge_attention_states(rng):
    out_a, out_b = on_gpu(rng, (3, 100, 8, 128)), on_gpu(rng, (3, 100, 8, 128))
    lse_a, lse_b = on_gpu(rng, (3, 8, 100), torch.float32), on_gpu(rng, (3, 8, 100), torch.float32)
    lse_a[0, 1, 3] = lse_a[1, 2, 5] = -float("inf")
    lse_b[1, 2, 5] = -float("inf")
    poison(torch, GPU, out_a.shape, lse_a.shape)
    out, lse = merge_attention_states(out_a, lse_a, out_b, lse_b)
    ref_out, ref_lse = reference.merge_attention_states(*(numpy64(x) for x in (out_a, lse_a, out_b, lse_b)))
    assert_rel_l2(out, ref_out, "bfloat16")
    assert_rel_l2(lse, ref_lse)


# --- streams, graphs, devices ------------------------------------------------------------------

def test_runs_on_the_current_stream(rng):
    """On a side stream, q is rewritten behind a long sleep and then attended: a launch on any
    other stream would read the old q."""
    q, k, v = (on_gpu(rng, (2, 256, 4, 64)) for _ in range(3))
    new_q = on_gpu(rng, q.shape)
    flash_attention(q, k, v, causal=True)  # loads the variant first
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(100_000_000)
        q.copy_(new_q)
        out = flash_attention(q, k, v, causal=True)
    side.synchronize()
    assert_rel_l2(out, expect(new_q, k, v, causal=True)[0], "bfloat16")


def test_captured_into_a_cuda_graph(rng):
    q, k, v = (on_gpu(rng, (2, 256, 4, 64)) for _ in range(3))
    x = on_gpu(rng, (2, 256, 128))
    # Warm up on the stream that is then captured: a stream's workspace cannot grow in a capture.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        flash_attention(q, k, v, causal=True)
        mean_pooling(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        out = flash_attention(q, k, v, causal=True)
        pooled = mean_pooling(x)
    for _ in range(2):  # new inputs in place, then replay
        for t in (q, k, v, x):
            t.copy_(on_gpu(rng, t.shape))
        graph.replay()
        torch.cuda.synchronize()
        assert_rel_l2(out, expect(q, k, v, causal=True)[0], "bfloat16")
        assert_rel_l2(pooled, reference.mean_pooling(numpy64(x)), "bfloat16")


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="one CUDA device: the second device's run is not tried")
def test_second_device(rng):
    q, k, v = (on_gpu(rng, (1, 128, 2, 64), device="cuda:1") for _ in range(3))
    out = flash_attention(q, k, v, causal=True)
    assert out.device == q.device
    assert_rel_l2(out, expect(q, k, v, causal=True)[0], "bfloat16")


def test_tensors_on_two_devices_are_a_value_error(rng):
    q = on_gpu(rng, (1, 16, 2, 64))
    with pytest.raises(ValueError, match="k"):
        flash_attention(q, q.cpu(), q)


# --- opcheck and torch.compile -----------------------------------------------------------------

def test_opcheck(rng):
    q, k, v = on_gpu(rng, (2, 64, 4, 64)), on_gpu(rng, (2, 80, 2, 64)), on_gpu(rng, (2, 80, 2, 64))
    torch.library.opcheck(torch.ops.ejk.flash_attention.default,
                          (q, k, v, None, None, None, None, None, None, None, None, True, [32, 0], None, True, None,
                           None))
    x = on_gpu(rng, (3, 40, 64)).requires_grad_()
    torch.library.opcheck(torch.ops.ejk.mean_pooling.default, (x, None))
    lse = on_gpu(rng, (4, 64), torch.float32)
    torch.library.opcheck(torch.ops.ejk.merge_attention_states.default, (q[0], lse, q[1], lse))


def test_compiled(rng):
    torch._dynamo.reset()
    q, k, v = on_gpu(rng, (2, 256, 8, 64)), on_gpu(rng, (2, 256, 2, 64)), on_gpu(rng, (2, 256, 2, 64))

    @torch.compile(fullgraph=True)
    def attend(q, k, v):
        return flash_attention(q * 2, k, v, causal=True) + 1

    out = attend(q, k, v)
    assert_rel_l2(out, expect(q * 2, k, v, causal=True)[0] + 1, "bfloat16")
    x = on_gpu(rng, (2, 100, 64), torch.float32).requires_grad_()
    torch.compile(lambda x: mean_pooling(x).square().sum(), fullgraph=True)(x).backward()
    assert_rel_l2(x.grad, np.broadcast_to(2 * reference.mean_pooling(numpy64(x))[:, None, :] / 100, x.shape))
