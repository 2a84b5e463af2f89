#!/usr/bin/env python3
"""A training step of attention, forward and backward through autograd, as a model calls it:
ejk.torch.flash_attention against PyTorch SDPA's cuDNN backend in the same process, row by row,
and with dropout against SDPA's FlashAttention-2 backend (cuDNN's SDPA path takes no dropout).

  train_step.py [--d 64,128] [--s 2048,8192] [--causal 0,1] [--dropout 0,0.1] [--passes 2]
                [--out out/bench/python]

bf16, B*S = 16k tokens, Hq*D = 2048, [B, S, H, D] tensors (SDPA gets [B, H, S, D] views of the
same ones), d_out fixed. Per row: device time of out = f(q, k, v); out.backward(d_out), CUDA
events around N steps back to back (median of 5 batches), TFLOP/s counting 3.5x the forward's
4*B*H*S*S*D (half for causal), and the ratio to the peer. Prints a table; writes
OUT/train_step.jsonl. Run from the repository root with ejk importable.
"""
import argparse
import json
import os
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from bench_torch import device_s  # CUDA events around calls back to back, median of batches
from ejk.torch import flash_attention


def step_flops(b, s, h, d, causal):
    return 3.5 * 4.0 * b * h * s * s * d / (2 if causal else 1)


def steps(causal, p):
    """name -> a function running one forward + backward on (q, k, v, d_out)."""
    def ejk(q, k, v, g):
        flash_attention(q, k, v, causal=causal, dropout_prob=p, dropout_seed=1).backward(g)

    def sdpa(backend):
        def run(q, k, v, g):
            with sdpa_kernel(backend):
                out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                     is_causal=causal, dropout_p=p)
            out.transpose(1, 2).backward(g)
        return run

    peer = ("cudnn", SDPBackend.CUDNN_ATTENTION) if p == 0 else ("fa2", SDPBackend.FLASH_ATTENTION)
    return {"ejk": ejk, peer[0]: sdpa(peer[1])}


def row(d, s, causal, p):
    b, h = 16384 // s, 2048 // d
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_()
               for _ in range(3))
    g = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    r = {"d": d, "s": s, "b": b, "h": h, "causal": causal, "dropout": p}
    for name, f in steps(bool(causal), p).items():
        try:
            sec = device_s(f, (q, k, v, g), n=max(3, 40 * 1024 // s))
            r[name] = step_flops(b, s, h, d, causal) / sec / 1e12
            r[name + "_ms"] = sec * 1e3
        except Exception as e:  # a peer without this case: say so, keep going
            r[name + "_error"] = str(e).splitlines()[0][:200]
        q.grad = k.grad = v.grad = None
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", default="64,128")
    ap.add_argument("--s", default="2048,8192")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--dropout", default="0,0.1")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--out", default="out/bench/python")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("train_step.py needs a CUDA device")
    os.makedirs(a.out, exist_ok=True)
    print({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__})
    rows = [(d, s, c, p) for p in map(float, a.dropout.split(",")) for d in map(int, a.d.split(","))
            for c in map(int, a.causal.split(",")) for s in map(int, a.s.split(","))]
    results = []
    with open(os.path.join(a.out, "train_step.jsonl"), "w") as log:
        for n in range(a.passes):  # passes interleave rows, so a clock drift spreads over all of them
            for key in rows:
                r = dict(row(*key), **{"pass": n})
                log.write(json.dumps(r) + "\n")
                results.append(r)
    print(f"{'row':>24} {'TFLOP/s ejk':>11} {'peer':>9} {'x peer':>7} {'ms ejk':>8} {'peer':>8}")
    for d, s, c, p in rows:
        rs = [x for x in results if (x["d"], x["s"], x["causal"], x["dropout"]) == (d, s, c, p)]
        peer = "cudnn" if p == 0 else "fa2"
        med = {k: statistics.median(x[k] for x in rs) for k in ("ejk", peer, "ejk_ms", peer + "_ms")
               if all(k in x for x in rs)}
        ratio = f"{med['ejk'] / med[peer]:.3f}" if "ejk" in med and peer in med else "-"
        cells = [f"{med[k]:.1f}" if k in med else "-" for k in ("ejk", peer)]
        times = [f"{med[k]:.3f}" if k in med else "-" for k in ("ejk_ms", peer + "_ms")]
        print(f"d{d:<3} {'causal' if c else '':6} {s:5} p{p:<4} {cells[0]:>11} {peer + ' ' + cells[1]:>9} "
              f"{ratio:>7} {times[0]:>8} {times[1]:>8}")
        for k in {k for x in rs for k in x if k.endswith("_error")}:
            print(f"    {k}: {rs[0].get(k)}")


if __name__ == "__main__":
    main()
