#!/usr/bin/env python3
"""ejk.torch.ring_attention on one GPU, over an NCCL group of one, against flash_attention on the
same arrays: its output (rel-L2, bit-identical expected: a ring of one is one flash call) and its
overhead, forward and forward + backward: CUDA events around calls back to back, ring and flash
batches interleaved (so clocks and caches treat both alike), median of batches.

  ring_one_gpu.py        (run from the repository root with ejk importable; one process)
"""
import os
import statistics

import torch
import torch.distributed as dist

import ejk.torch as et


def per_call_ms(fs, n=40, batches=7):
    """Milliseconds per call of each function: batches of n calls, the functions' batches
    interleaved, median per function."""
    for f in fs.values():
        for _ in range(5):
            f()
    per = {name: [] for name in fs}
    for _ in range(batches):
        for name, f in fs.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(n):
                f()
            end.record()
            end.synchronize()
            per[name].append(start.elapsed_time(end) / n)
    return {name: statistics.median(t) for name, t in per.items()}


def main():
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    dist.init_process_group("nccl", rank=0, world_size=1)
    group = dist.group.WORLD
    torch.manual_seed(0)
    for b, s, h, d, causal in ((2, 4096, 16, 128, True), (1, 8192, 16, 128, False), (4, 2048, 32, 64, True)):
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16).requires_grad_() for _ in range(3))
        g = torch.randn_like(q)
        ring = lambda: et.ring_attention(q, k, v, causal=causal, axis_name=group)  # noqa: E731
        flash = lambda: et.flash_attention(q, k, v, causal=causal)  # noqa: E731
        err = ((ring().float() - flash().float()).norm() / flash().float().norm()).item()
        t = per_call_ms({"flash": flash, "ring": ring})
        t |= per_call_ms({"flash_step": lambda: flash().backward(g), "ring_step": lambda: ring().backward(g)})
        print(f"B{b} S{s} H{h} D{d} causal={causal}: rel_l2 {err:.2e}; forward flash {t['flash']:.3f} ms, ring "
              f"{t['ring']:.3f} ms (x{t['ring'] / t['flash']:.3f}); forward+backward flash {t['flash_step']:.3f} ms, "
              f"ring {t['ring_step']:.3f} ms (x{t['ring_step'] / t['flash_step']:.3f})", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
