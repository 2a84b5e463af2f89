"""page_attention on the GPU through libejk's C ABI on torch tensors, timed with CUDA events over a
CUDA graph of 20 calls (no host launch cost in the number), against the copy bandwidth (eager
`copy_` of 2 GiB; a graph's copy is a memcpy node on the copy engines, slower) and torch SDPA
(cuDNN first) on the same K/V stored contiguously. Rows: the docs/perf.md "Paged decode" table.

  PYTHONPATH=python:bench/python EJK_LIBRARY_DIR=BUILD/runtime python3 bench/python/page_decode_gpu.py
"""
import ctypes
import math

import torch
import torch.nn.functional as F

from bench_torch import copy_gbs
from ejk import _lib


lib = _lib.libejk()


def timed(fn, stream, calls=20, reps=5):
    """Median ms per call: a CUDA graph of `calls` calls replayed `reps` times (eager if capture fails)."""
    with torch.cuda.stream(stream):
        fn(); fn()
    stream.synchronize()
    how = "graph"
    try:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=stream):
            for _ in range(calls):
                fn()
        run = g.replay
    except Exception as e:  # noqa: BLE001
        how = f"eager ({type(e).__name__})"
        torch.cuda.synchronize()
        def run():
            for _ in range(calls):
                fn()
    ts = []
    with torch.cuda.stream(stream):
        run()
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(stream); run(); b.record(stream); b.synchronize()
            ts.append(a.elapsed_time(b) / calls)
    ts.sort()
    return ts[len(ts) // 2], how


def row(S, hq, hkv, D, bs, ctx, splits=None, full=True, sdpa=True):
    torch.manual_seed(0)
    mb = -(-ctx // bs)
    nb = S * mb + 1
    dt = torch.bfloat16
    q = torch.randn(S, hq, D, device="cuda", dtype=dt)
    kc = torch.randn(nb, hkv, bs, D, device="cuda", dtype=dt)
    vc = torch.randn(nb, hkv, bs, D, device="cuda", dtype=dt)
    tables = torch.randperm(nb, device="cuda")[: S * mb].reshape(S, mb).to(torch.int32).contiguous()
    lens = (torch.full((S,), ctx, device="cuda", dtype=torch.int32) if full
            else torch.randint(0, ctx + 1, (S,), device="cuda", dtype=torch.int32))
    if not full:
        lens[-1] = ctx
    out = torch.empty_like(q)
    # The side stream below is not ordered after the default stream's setup: without this, the
    # call may run (and write out, possibly over a freed temporary still being read) before it.
    torch.cuda.synchronize()
    names = dict(query=q, key_cache=kc, value_cache=vc, context_lens=lens, block_tables=tables, out=out)
    args = _lib.ArgList()
    for n, t in names.items():
        args.tensor(n, tuple(t.shape), str(t.dtype).removeprefix("torch."), t.data_ptr(), _lib.DEVICE_CUDA,
                    t.device.index)
    if splits is not None:
        args.scalar("num_splits", _lib.ARG_INT, splits)
    arr, n_args = args.array()
    stream = torch.cuda.Stream()
    ctxs = _lib.Context(ctypes.sizeof(_lib.Context), _lib.BACKEND_CUDA, stream.cuda_stream, None, None)

    def call():
        _lib.raise_for(lib.ejk_run(b"page_attention", arr, n_args, ctypes.byref(ctxs)), lib)

    ms, how = timed(call, stream)
    positions = lens.long().sum().item()
    nbytes = 2 * positions * hkv * D * 2 + 2 * q.numel() * 2
    # correctness spot check of the first and last sequence against float32 torch
    err = 0.0
    for s in (0, S - 1):
        n = int(lens[s].item())
        if n == 0:
            continue
        pos = torch.arange(n, device="cuda")
        blk = tables[s, pos // bs].long()
        k = kc[blk, :, pos % bs].float().transpose(0, 1)  # [hkv, n, D]
        v = vc[blk, :, pos % bs].float().transpose(0, 1)
        g = hq // hkv
        qs = q[s].float().view(hkv, g, D)
        w = torch.softmax(qs @ k.transpose(1, 2) / math.sqrt(D), dim=-1)
        ref = (w @ v).reshape(hq, D)
        err = max(err, ((out[s].float() - ref).norm() / ref.norm()).item())
    res = dict(S=S, hq=hq, hkv=hkv, D=D, bs=bs, ctx=ctx, full=full, splits=splits, ms=round(ms, 4),
               gbps=round(nbytes / ms / 1e6, 1), timing=how, rel_l2_spot=f"{err:.2e}")
    if sdpa:
        try:
            from torch.nn.attention import sdpa_kernel, SDPBackend
            k4 = torch.randn(S, hkv, ctx, D, device="cuda", dtype=dt)
            v4 = torch.randn(S, hkv, ctx, D, device="cuda", dtype=dt)
            q4 = q.view(S, hq, 1, D)
            for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
                             ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
                try:
                    with sdpa_kernel([be]):
                        F.scaled_dot_product_attention(q4, k4, v4, enable_gqa=hq != hkv)
                        sms, _ = timed(lambda: F.scaled_dot_product_attention(q4, k4, v4, enable_gqa=hq != hkv), stream)
                    res["sdpa"] = f"{name} {sms:.4f} ms ({2 * S * ctx * hkv * D * 2 / sms / 1e6:.0f} GB/s)"
                    res["x_sdpa"] = round(sms / ms, 2)
                    break
                except Exception as e:  # noqa: BLE001
                    res.setdefault("sdpa_fail", []).append(f"{name}: {type(e).__name__}")
            del k4, v4
        except Exception as e:  # noqa: BLE001
            res["sdpa"] = f"unavailable: {e}"
    del kc, vc
    torch.cuda.empty_cache()
    return res


bw = copy_gbs()
print(f"copy_ bandwidth (read + write, 2 GiB, eager, bench_torch.copy_gbs): {bw:.0f} GB/s", flush=True)
rows = [
    (8, 8, 8, 128, 16, 4096), (8, 32, 8, 128, 16, 4096), (8, 48, 8, 128, 16, 4096), (8, 64, 8, 128, 16, 4096),
    (8, 8, 8, 128, 64, 4096), (8, 32, 8, 128, 64, 4096), (8, 48, 8, 128, 64, 4096), (8, 64, 8, 128, 64, 4096),
    (64, 32, 8, 128, 16, 8192), (4, 32, 8, 128, 16, 32768), (64, 8, 8, 128, 16, 4096), (64, 64, 8, 128, 16, 4096),
    (256, 32, 8, 128, 16, 256), (256, 32, 8, 128, 64, 256), (32, 32, 8, 128, 16, 128),
]
for r in rows:
    try:
        res = row(*r)
        res["x_copy"] = round(res["gbps"] / bw, 3)
        print(res, flush=True)
    except Exception as e:  # noqa: BLE001
        print(r, "failed:", e, flush=True)
for extra in [dict(splits=2), dict(splits=8), dict(splits=16)]:
    try:
        res = row(8, 32, 8, 128, 16, 4096, sdpa=False, **extra)
        res["x_copy"] = round(res["gbps"] / bw, 3)
        print(res, flush=True)
    except Exception as e:  # noqa: BLE001
        print(extra, "failed:", e, flush=True)
for r in [(64, 32, 8, 128, 16, 4096), (64, 32, 8, 128, 64, 4096)]:
    try:
        res = row(*r, full=False, sdpa=False)
        res["x_copy"] = round(res["gbps"] / bw, 3)
        print("random contexts:", res, flush=True)
    except Exception as e:  # noqa: BLE001
        print(r, "failed:", e, flush=True)
