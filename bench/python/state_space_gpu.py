#!/usr/bin/env python3
"""State-space scans on the GPU through ejk.torch, against mamba-ssm's Triton SSD in the same
process, forward and forward + backward.

  state_space_gpu.py [--ops ssd,scan] [--reps 10] [--json FILE]

ssd: ejk.torch.state_space_v2 (Mamba-2; H 64, P 64, N 128, one group, D, no gate) against
mamba-ssm's mamba_chunk_scan_combined (chunk 256, its default in Mamba2) with the final state
returned, on the same bf16 tensors (dt already softplus-ed, as the seed takes it).
scan: ejk.torch.state_space_v1 (Mamba-1; d 2048/4096, n 16, gate); its only peer here is the
copy bandwidth: bytes are x, dt, gate and y (d per token) plus B and C (n per token), measured
against torch's copy_ of 2 GiB in the same run. Forward + backward is a sum of the outputs'
backward. mamba-ssm's Triton files must be importable (PYTHONPATH); a missing peer is reported
and skipped. Device time: CUDA events around calls back to back (bench_torch.device_s).
"""
import argparse
import json

import torch

import ejk.torch as et
from bench_torch import copy_gbs, device_s

SSD_SHAPES = ((1, 16384), (2, 8192), (4, 4096), (8, 2048))
SCAN_SHAPES = ((8, 2048, 2048), (4, 4096, 2048), (2, 8192, 4096), (1, 16384, 4096))
H, P, N = 64, 64, 128


def rel_l2(a, b):
    a, b = a.float(), b.float()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def rand(*shape, grad=False, dtype=torch.bfloat16, scale=1.0):
    return (torch.randn(*shape, device="cuda") * scale).to(dtype).requires_grad_(grad)


def ssd_inputs(b, s, grad):
    x, bm, cm = rand(b, s, H, P, grad=grad), rand(b, s, 1, N, grad=grad), rand(b, s, 1, N, grad=grad)
    dt = torch.nn.functional.softplus(torch.randn(b, s, H, device="cuda") - 2).to(torch.bfloat16)
    dt.requires_grad_(grad)
    a = (-torch.rand(H, device="cuda") * 4 - 0.5).requires_grad_(grad)
    d = torch.randn(H, device="cuda").requires_grad_(grad)
    return x, a, bm, cm, d, dt


def ssd_pair(b, s, grad):
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
    x, a, bm, cm, d, dt = ssd_inputs(b, s, grad)
    ours = lambda: et.state_space_v2(x, a, bm, cm, d, dt)[:2]  # noqa: E731

    def theirs():
        y, state = mamba_chunk_scan_combined(x, dt, a, bm, cm, chunk_size=256, D=d, return_final_states=True)
        return y.reshape(b, s, H * P), state

    return ours, theirs, (x, a, bm, cm, d, dt)


def backward_of(f, leaves):
    def step():
        for t in leaves:
            t.grad = None
        y, state = f()
        (y.float().sum() + state.float().sum()).backward()
    return step


def run_ssd(reps, rows):
    print(f"{'ssd':<6} {'B':>3} {'S':>6} {'pass':>5} {'ejk ms':>9} {'mamba ms':>9} {'mamba/ejk':>9} {'rel_l2':>9}")
    for b, s in SSD_SHAPES:
        for grad in (False, True):
            try:
                ours, theirs, leaves = ssd_pair(b, s, grad)
                with torch.no_grad():
                    err = rel_l2(ours()[0], theirs()[0])
                fo, ft = (backward_of(ours, leaves), backward_of(theirs, leaves)) if grad else (ours, theirs)
                mo, mt = device_s(fo, (), reps) * 1e3, device_s(ft, (), reps) * 1e3
            except (ImportError, RuntimeError, ValueError, NotImplementedError) as e:
                print(f"ssd    {b:>3} {s:>6} skipped: {type(e).__name__}: {e}")
                rows.append({"op": "ssd", "B": b, "S": s, "skipped": f"{type(e).__name__}: {e}"})
                continue
            name = "f+b" if grad else "fwd"
            print(f"ssd    {b:>3} {s:>6} {name:>5} {mo:>9.3f} {mt:>9.3f} {mt / mo:>9.2f} {err:>9.2e}")
            rows.append({"op": "ssd", "B": b, "S": s, "pass": name, "ejk_ms": mo, "mamba_ms": mt,
                         "ratio": mt / mo, "rel_l2": err})
            torch.cuda.empty_cache()


def run_scan(reps, rows):
    copy = copy_gbs()
    print(f"copy bandwidth {copy:.0f} GB/s (read + write)")
    print(f"{'scan':<6} {'B':>3} {'S':>6} {'d':>5} {'fwd ms':>9} {'GB/s':>7} {'x copy':>7} {'f+b ms':>9}")
    n = 16
    for b, s, dm in SCAN_SHAPES:
        x, gate = rand(b, s, dm, grad=True), rand(b, s, dm, grad=True)
        bm, cm = rand(b, s, n, grad=True), rand(b, s, n, grad=True)
        dt = torch.nn.functional.softplus(torch.randn(b, s, dm, device="cuda") - 2).to(torch.bfloat16)
        dt.requires_grad_(True)
        a = (-torch.rand(dm, n, device="cuda") * 4 - 0.5).requires_grad_(True)
        d = torch.randn(dm, device="cuda").requires_grad_(True)
        leaves = (x, a, bm, cm, d, dt, gate)
        f = lambda: et.state_space_v1(x, a, bm, cm, d, dt, gate)[:2]  # noqa: E731
        with torch.no_grad():
            mf = device_s(f, (), reps) * 1e3
        mb = device_s(backward_of(f, leaves), (), reps) * 1e3
        gbs = (4 * b * s * dm + 2 * b * s * n) * 2 / (mf * 1e-3) / 1e9
        print(f"scan   {b:>3} {s:>6} {dm:>5} {mf:>9.3f} {gbs:>7.0f} {gbs / copy:>7.2f} {mb:>9.3f}")
        rows.append({"op": "scan", "B": b, "S": s, "d": dm, "fwd_ms": mf, "gbs": gbs, "copy_gbs": copy,
                     "fwd_bwd_ms": mb})
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ops", default="ssd,scan")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    rows = []
    ops = args.ops.split(",")
    if "ssd" in ops:
        run_ssd(args.reps, rows)
    if "scan" in ops:
        run_scan(args.reps, rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
