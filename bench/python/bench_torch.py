#!/usr/bin/env python3
"""Flash attention forward through ejk.torch under torch.compile, against PyTorch SDPA's cuDNN
backend (sdpa_kernel(SDPBackend.CUDNN_ATTENTION), also compiled) in the same process, row by row.

  bench_torch.py [--d 64,128] [--s 1024,4096,16384] [--causal 0,1] [--passes 3] [--out out/bench/python]

bf16, B*S = 16k tokens, Hq*D = 2048 (the forward grid), [B, S, H, D] tensors (SDPA gets the
[B, H, S, D] views of the same ones). Per row: device time per call from CUDA events around N
calls back to back (after a warm-up, median of 5 batches), TFLOP/s (4*B*H*S*S*D, half for
causal), the ratio to cuDNN and to the same kernel called through the C ABI without PyTorch
(ejk_run on preallocated outputs, torch's stream: what the custom op keeps of it), and host time
per call (N calls without synchronising, then one sync; median of rounds). A small call (B=1, S=128, H=16, D=128, causal), where the host cost is
what a caller sees, adds ejk.torch eagerly. Prints a table; writes OUT/torch.jsonl (every pass)
and OUT/torch.json (the medians). Run from the repository root with ejk importable (pip install,
or PYTHONPATH=python EJK_LIBRARY_DIR=BUILD/runtime).
"""
import argparse
import ctypes
import json
import os
import statistics
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from ejk import _lib
from ejk.torch import flash_attention

# One compiled graph per shape and mask: more than dynamo's default number of recompiles.
for _name in ("recompile_limit", "cache_size_limit"):
    if hasattr(torch._dynamo.config, _name):
        setattr(torch._dynamo.config, _name, 256)


def flops(b, s, h, d, causal):
    return 4.0 * b * h * s * s * d / (2 if causal else 1)


def inputs(b, s, h, d):
    g = torch.Generator(device="cuda").manual_seed(0)
    return [torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3)]


def c_abi(causal):
    """The C++ path without PyTorch: ejk_run on preallocated outputs on torch's current stream
    (ctypes), as a reference for what the custom op keeps of the kernel's throughput."""
    lib, made = _lib.libejk(), {}

    def call(q, k, v):
        if q.shape not in made:  # descriptors and outputs once per shape, as a C++ caller would
            b, s, h, d = q.shape
            out, lse = torch.empty_like(q), torch.empty(b, h, s, device=q.device, dtype=torch.float32)
            args = _lib.ArgList()
            for name, t in (("q", q), ("k", k), ("v", v), ("out", out), ("lse", lse)):
                args.tensor(name, tuple(t.shape), str(t.dtype).removeprefix("torch."), t.data_ptr(),
                            _lib.DEVICE_CUDA, t.device.index)
            args.scalar("causal", _lib.ARG_BOOL, causal)
            ctx = _lib.Context(ctypes.sizeof(_lib.Context), _lib.BACKEND_CUDA,
                               torch.cuda.current_stream().cuda_stream, None, None)
            made[q.shape] = (args, args.array(), ctx, out, lse)
        _, (array, n), ctx, out, _ = made[q.shape]
        _lib.raise_for(lib.ejk_run(b"flash_attention", array, n, ctypes.byref(ctx)), lib)
        return out

    return call


def candidates(causal):
    def ejk(q, k, v):
        return flash_attention(q, k, v, causal=causal)

    def cudnn(q, k, v):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            out = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
        return out.transpose(1, 2)

    return {"ejk": torch.compile(ejk, fullgraph=True, dynamic=False),
            "cudnn": torch.compile(cudnn, fullgraph=True, dynamic=False),
            "ejk_eager": ejk, "c_abi": c_abi(causal)}


def device_s(f, args, n, batches=5):
    """Seconds per call on the device: CUDA events around n calls back to back, median of batches."""
    for _ in range(3):
        f(*args)
    per = []
    for _ in range(batches):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            f(*args)
        end.record()
        end.synchronize()
        per.append(start.elapsed_time(end) / 1e3 / n)
    return statistics.median(per)


def copy_gbs(n=10):
    """The device's copy bandwidth (read + write) in GB/s: Tensor.copy_ of 2 GiB, device_s."""
    src = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() / device_s(lambda: dst.copy_(src), (), n) / 1e9


def host_us(f, args, n=20, rounds=21):
    """Host microseconds per call: n calls without waiting, then a sync; median over rounds."""
    per = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            f(*args)
        per.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    return statistics.median(per)


def row(d, s, causal):
    b, h = 16384 // s, 2048 // d
    args = inputs(b, s, h, d)
    r = {"d": d, "s": s, "b": b, "h": h, "causal": causal}
    for name, f in candidates(bool(causal)).items():
        if name == "ejk_eager":
            continue
        try:
            sec = device_s(f, args, n=max(5, 200 * 1024 // s))
            r[name] = flops(b, s, h, d, causal) / sec / 1e12
            r[name + "_ms"] = sec * 1e3
            r[name + "_host_us"] = host_us(f, args)
        except Exception as e:  # a peer without this shape: say so, keep going
            r[name + "_error"] = str(e).splitlines()[0][:200]
    return r


def small_call():
    args = inputs(1, 128, 16, 128)
    r = {"what": "small call b1 s128 h16 d128 causal"}
    for name, f in candidates(True).items():
        try:
            r[name + "_host_us"] = host_us(f, args, n=200)
            r[name + "_device_us"] = device_s(f, args, n=2000) * 1e6
        except Exception as e:
            r[name + "_error"] = str(e).splitlines()[0][:200]
    return r


def medians(results, rows):
    keys = ("ejk", "cudnn", "c_abi", "ejk_ms", "cudnn_ms", "ejk_host_us", "cudnn_host_us", "c_abi_host_us")
    out = []
    for d, s, c in rows:
        rs = [x for x in results if (x["d"], x["s"], x["causal"]) == (d, s, c)]
        m = {"d": d, "s": s, "causal": c}
        for k in keys:
            if all(k in x for x in rs):
                m[k] = statistics.median(x[k] for x in rs)
        if "ejk" in m and "cudnn" in m:
            m["ratio"] = m["ejk"] / m["cudnn"]
        if "ejk" in m and "c_abi" in m:
            m["of_c_abi"] = m["ejk"] / m["c_abi"]
        errors = {k: x[k] for x in rs for k in x if k.endswith("_error")}
        out.append(dict(m, **errors))
    return out


def print_table(small, table):
    f = lambda v, w=7: f"{v:{w}.1f}" if v is not None else " " * (w - 1) + "-"
    print(f"small call: host us/call ejk compiled {f(small.get('ejk_host_us'))}, eager "
          f"{f(small.get('ejk_eager_host_us'))}, cuDNN compiled {f(small.get('cudnn_host_us'))}; device us "
          f"{f(small.get('ejk_device_us'))} / {f(small.get('ejk_eager_device_us'))} / {f(small.get('cudnn_device_us'))}")
    print(f"{'row':>16} {'TFLOP/s ejk':>11} {'cudnn':>7} {'C ABI':>7} {'x cuDNN':>7} {'x C ABI':>7} "
          f"{'host us ejk':>11} {'cudnn':>7} {'C ABI':>7}")
    for m in table:
        ratio = f"{m['ratio']:.3f}" if "ratio" in m else "-"
        of_c = f"{m['of_c_abi']:.3f}" if "of_c_abi" in m else "-"
        print(f"d{m['d']:<3} {'causal' if m['causal'] else '':6} {m['s']:5} {f(m.get('ejk'), 11)} "
              f"{f(m.get('cudnn'))} {f(m.get('c_abi'))} {ratio:>7} {of_c:>7} {f(m.get('ejk_host_us'), 11)} "
              f"{f(m.get('cudnn_host_us'))} {f(m.get('c_abi_host_us'))}")
        for k, v in m.items():
            if k.endswith("_error"):
                print(f"    {k}: {v}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", default="64,128")
    ap.add_argument("--s", default="1024,4096,16384")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--out", default="out/bench/python")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_torch.py needs a CUDA device")
    os.makedirs(a.out, exist_ok=True)
    device = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda}
    print(device)
    rows = [(d, s, c) for d in map(int, a.d.split(",")) for c in map(int, a.causal.split(","))
            for s in map(int, a.s.split(","))]
    results = []
    with open(os.path.join(a.out, "torch.jsonl"), "w") as log:
        small = small_call()
        log.write(json.dumps(small) + "\n")
        for p in range(a.passes):  # passes interleave rows, so a clock drift spreads over all of them
            for d, s, c in rows:
                r = dict(row(d, s, c), **{"pass": p})
                log.write(json.dumps(r) + "\n")
                log.flush()
                results.append(r)
    table = medians(results, rows)
    with open(os.path.join(a.out, "torch.json"), "w") as f:
        json.dump({"device": device, "small_call": small, "rows": table}, f, indent=1)
    print_table(small, table)


if __name__ == "__main__":
    main()
