#!/usr/bin/env python3
"""The peers of grouped_matmul on the GPU: torch._grouped_mm (forward, and the backward's two
products) and a dense torch.matmul of the same FLOPs, row by row.

  grouped_matmul_gpu.py [--shapes M,K,N,G;...] [--seed 0] [--out out/bench/python]

bf16. Per shape: lhs [M, K], rhs [G, K, N], M rows cut into G groups at uniform random points
(uneven, some possibly empty: what `ejk run grouped_matmul` does), offs their running ends.
Rows: torch._grouped_mm with rhs row-major and with rhs stored [G, N, K] (its transposed view),
the backward's dlhs = dout rhs^T and drhs = lhs^T dout (2-D x 2-D grouped over M), and
torch.matmul [M, K] x [K, N] (the dense rate at the same FLOPs). Device time per call from CUDA
events around calls back to back (median of batches); TFLOP/s over 2 M K N per product. Prints
one JSON object a row; writes OUT/grouped_matmul_gpu.json. Needs only torch (ejk's own timing
comes from `ejk run grouped_matmul ... --backend cuda --json` in the same device call).
"""
import argparse
import json
import os
import statistics

import torch


def device_s(f, n=20, batches=5):
    """Seconds per call: CUDA events around n calls back to back, median of batches."""
    for _ in range(3):
        f()
    per = []
    for _ in range(batches):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            f()
        end.record()
        end.synchronize()
        per.append(start.elapsed_time(end) / 1e3 / n)
    return statistics.median(per)


def uneven_offsets(m, g, seed):
    gen = torch.Generator().manual_seed(seed)
    cuts = torch.sort(torch.randint(0, m + 1, (g - 1,), generator=gen)).values
    ends = torch.cat([cuts, torch.tensor([m])]).to(torch.int32)
    return ends.cuda(), (ends - torch.cat([torch.tensor([0], dtype=torch.int32), ends[:-1]])).tolist()


def rows(m, k, n, g, seed, iters):
    offs, sizes = uneven_offsets(m, g, seed)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    lhs = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    rhs = torch.randn(g, k, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    rhs_t = rhs.transpose(-2, -1).contiguous()  # [G, N, K]
    dout = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    dense_b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    flops = 2.0 * m * k * n
    cases = {
        "torch._grouped_mm": (lambda: torch._grouped_mm(lhs, rhs, offs=offs, out_dtype=torch.bfloat16), 1),
        "torch._grouped_mm rhs [G,N,K]": (
            lambda: torch._grouped_mm(lhs, rhs_t.transpose(-2, -1), offs=offs, out_dtype=torch.bfloat16), 1),
        "torch._grouped_mm dlhs": (
            lambda: torch._grouped_mm(dout, rhs.transpose(-2, -1), offs=offs, out_dtype=torch.bfloat16), 1),
        "torch._grouped_mm drhs": (
            lambda: torch._grouped_mm(lhs.t(), dout, offs=offs, out_dtype=torch.bfloat16), 1),
        "torch.matmul dense": (lambda: torch.matmul(lhs, dense_b), 1),
    }
    out = []
    for name, (f, products) in cases.items():
        r = {"peer": name, "m": m, "k": k, "n": n, "groups": g, "min_group": min(sizes), "max_group": max(sizes)}
        try:
            s = device_s(f, iters)
            r.update(ms=s * 1e3, tflops=products * flops / s / 1e12)
        except Exception as e:  # a layout the installed torch refuses: say so, keep the other rows
            r["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        print(json.dumps(r), flush=True)
        out.append(r)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="16384,4096,4096,8;32768,4096,1536,64")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--out", default="out/bench/python")
    a = ap.parse_args()
    print(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name()}), flush=True)
    results = []
    for shape in a.shapes.split(";"):
        m, k, n, g = (int(x) for x in shape.split(","))
        results += rows(m, k, n, g, a.seed, a.iters)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "grouped_matmul_gpu.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
