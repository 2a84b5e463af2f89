#!/usr/bin/env python3
"""CPU flash attention forward through the product (`ejk run`), against PyTorch's CPU
scaled_dot_product_attention on the same shapes, the same thread count, in one run.

  python3 bench/cpu/bench_vs_torch.py [--ejk build/cli/ejk] [--threads 2] [--iters 5] [--rounds 5]

Shapes: B=1, H=16, S=2048, D=128, causal and not, f32 and bf16. Our time is the
median of --iters timed runs after a warm run (ejk's own timer); torch's the median of as many
after a warm-up. On a shared machine the speed drifts by tens of percent within minutes, so
each shape runs --rounds rounds of (ours, torch) back to back: the table shows the best time
of each side and the median of the per-round ratios. Also reports the cold JIT compile (best
and median of --rounds fresh cache directories) and a cache-hit load of a variant outside the
AOT set (head_dim 96).
"""
import argparse, json, os, statistics, subprocess, tempfile, time

import torch
import torch.nn.functional as F


def ejk_run(ejk, args, env):
    out = subprocess.run([ejk, "run", "flash_attention", *args, "--json"], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out[out.index("{"):])


def torch_ms(b, h, s, d, causal, dtype, iters):
    q, k, v = (torch.randn(b, h, s, d, dtype=dtype) for _ in range(3))
    f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    f()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter(); f(); times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ejk", default="build/cli/ejk")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    env = dict(os.environ, EJK_NUM_THREADS=str(a.threads), EJK_CACHE_DIR=tempfile.mkdtemp(prefix="ejk-bench-"))
    b, h, s, d = 1, 16, 2048, 128
    print(f"B={b} H={h} S={s} D={d}, {a.threads} threads, torch {torch.__version__}")
    print(f"{'dtype':>5} {'causal':>6} | {'ejk ms':>8} {'GFLOP/s':>8} {'torch ms':>9} | {'ratio':>5}  (range)  variant")
    for dtype, tdt in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        for causal in (False, True):
            args = ["--b", str(b), "--sq", str(s), "--sk", str(s), "--hq", str(h), "--hkv", str(h), "--d", str(d),
                    "--dtype", dtype, "--iters", str(a.iters)] + (["--causal"] if causal else [])
            ours_ms, theirs_ms, ratios = [], [], []
            for _ in range(a.rounds):
                ours = ejk_run(a.ejk, args, env)
                theirs = torch_ms(b, h, s, d, causal, tdt, a.iters)
                ours_ms.append(ours["ms"]), theirs_ms.append(theirs), ratios.append(theirs / ours["ms"])
            flops = 4 * b * h * s * s * d * (0.5 if causal else 1.0)
            print(f"{dtype:>5} {str(causal):>6} | {min(ours_ms):8.1f} {flops / min(ours_ms) * 1e-6:8.1f} "
                  f"{min(theirs_ms):9.1f} | {statistics.median(ratios):5.2f}  ({min(ratios):.2f}-{max(ratios):.2f})"
                  f"  {ours['key']} ({ours['source']})", flush=True)
    jit_args = ["--b", "1", "--sq", "256", "--sk", "256", "--hq", "4", "--hkv", "4", "--d", "96", "--causal",
                "--dtype", "bf16", "--iters", "1"]
    colds = []
    for _ in range(a.rounds):
        fresh = dict(env, EJK_CACHE_DIR=tempfile.mkdtemp(prefix="ejk-bench-jit-"))
        cold = ejk_run(a.ejk, jit_args, fresh)
        colds.append(cold["compile_ms"])
    hit = ejk_run(a.ejk, jit_args, fresh)
    print(f"JIT {cold['key']}: cold compile {min(colds):.0f} ms best, {statistics.median(colds):.0f} ms median "
          f"of {a.rounds} ({cold['source']}); next process: {hit['source']} load {hit['load_ms']:.2f} ms")

if __name__ == "__main__":
    main()
