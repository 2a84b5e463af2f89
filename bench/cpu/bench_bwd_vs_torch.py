#!/usr/bin/env python3
"""CPU flash attention backward through the product (`ejk run flash_attention_backward`), against
PyTorch's CPU autograd backward of scaled_dot_product_attention on the same shapes, the same
thread count, in one run.

  python3 bench/cpu/bench_bwd_vs_torch.py [--ejk build/cli/ejk] [--threads 2] [--iters 3] [--rounds 5]
                                          [--s 1024] [--h 8]

Shapes: B=1, H=8, S=1024; f32 D=64 (causal and not), bf16 D=64 (causal and not), f32 D=128.
Our time is ejk's own timer (median of --iters runs after a warm run); torch's the median of as
many timed backward passes (torch.autograd.grad of one forward, graph retained) after a warm-up:
the backward only, as ours. On a shared machine the speed drifts by tens of percent within
minutes, so each shape runs --rounds rounds of (ours, torch) back to back: the table shows the
best time of each side and the median of the per-round ratios (torch ms / ours ms, > 1: ours is
faster) with their range.
"""
import argparse, json, os, statistics, subprocess, tempfile, time

import torch
import torch.nn.functional as F

SHAPES = [  # (dtype, head_dim, causal)
    ("f32", 64, False), ("f32", 64, True), ("bf16", 64, False), ("bf16", 64, True), ("f32", 128, False),
]
TORCH_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def ejk_run(ejk, args, env):
    out = subprocess.run([ejk, "run", "flash_attention_backward", "--backend", "cpu", *args, "--json"], env=env,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out[out.index("{"):])


def torch_bwd_ms(b, h, s, d, causal, dtype, iters):
    q, k, v = (torch.randn(b, h, s, d, dtype=dtype, requires_grad=True) for _ in range(3))
    d_out = torch.randn(b, h, s, d, dtype=dtype)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    grad = lambda: torch.autograd.grad(out, (q, k, v), d_out, retain_graph=True)
    grad()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter(); grad(); times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ejk", default="build/cli/ejk")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--s", type=int, default=1024)
    p.add_argument("--h", type=int, default=8)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    env = dict(os.environ, EJK_NUM_THREADS=str(a.threads), EJK_CACHE_DIR=tempfile.mkdtemp(prefix="ejk-bench-"))
    b, h, s = 1, a.h, a.s
    print(f"B={b} H={h} S={s}, {a.threads} threads, torch {torch.__version__}, {a.rounds} rounds")
    print(f"{'dtype':>5} {'D':>4} {'causal':>6} | {'ejk ms':>8} {'torch ms':>9} | {'ratio':>5}  (range)  variant")
    for dtype, d, causal in SHAPES:
        args = ["--b", str(b), "--sq", str(s), "--sk", str(s), "--hq", str(h), "--hkv", str(h), "--d", str(d),
                "--dtype", dtype, "--iters", str(a.iters)] + (["--causal"] if causal else [])
        ours_ms, theirs_ms, ratios = [], [], []
        for _ in range(a.rounds):
            ours = ejk_run(a.ejk, args, env)
            theirs = torch_bwd_ms(b, h, s, d, causal, TORCH_DTYPES[dtype], a.iters)
            ours_ms.append(ours["ms"]), theirs_ms.append(theirs), ratios.append(theirs / ours["ms"])
        print(f"{dtype:>5} {d:>4} {str(causal):>6} | {min(ours_ms):8.1f} {min(theirs_ms):9.1f} | "
              f"{statistics.median(ratios):5.2f}  ({min(ratios):.2f}-{max(ratios):.2f})  {ours['key']} ({ours['source']})",
              flush=True)


if __name__ == "__main__":
    main()
