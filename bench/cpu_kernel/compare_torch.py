#!/usr/bin/env python3
"""Times torch.nn.functional.scaled_dot_product_attention on the CPU against the ejkernel CPU
flash kernel on the same shapes, the same thread count, in one process and on the same input
tensors, and prints the ratios.

Shapes: B=1, H=16, S=2048, D=128, causal and not, f32 and bf16 (docs/perf.md's CPU rows).
Torch gets its native [B, H, S, D] contiguous tensors. The kernel (loaded from
libejk_cpu_kernel_bench.so, built by build.sh) is timed on its own [B, S, H, D] layout
("bshd", a contiguous transposed copy) and on torch's tensors as they are ("bhsd", by strides).
Each kernel output is also checked against torch's (relative L2 printed).

The machine may be shared: a sample runs the timed call for about a second and counts only if
other processes used less than a tenth of a CPU meanwhile (the C++ benchmark's quiet_timer.h
does the same); torch and the kernel alternate, and the best accepted sample of each is kept.

usage: compare_torch.py --lib out/bench/cpu_kernel/g++-native/libejk_cpu_kernel_bench.so [--samples 3]
"""
import argparse
import ctypes
import math
import os
import time

import torch

SHAPE = dict(batch=1, heads=16, seq=2048, head_dim=128)
DTYPES = {"f32": (torch.float32, 0), "bf16": (torch.bfloat16, 1)}


def machine_busy_seconds():
    """CPU seconds all processes spent busy (first line of /proc/stat, minus idle and iowait)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def quiet_sample(fn, calls, max_foreign_cpus=0.1):
    """Per-call ms of `calls` calls, and whether other processes stayed off the CPUs."""
    busy0, own0, t0 = machine_busy_seconds(), time.process_time(), time.perf_counter()
    for _ in range(calls):
        fn()
    wall = time.perf_counter() - t0
    foreign = (machine_busy_seconds() - busy0 - (time.process_time() - own0)) / wall
    return wall * 1e3 / calls, foreign < max_foreign_cpus


class Timing:
    """Best per-call time of the quiet samples (of all samples while none was quiet)."""

    def __init__(self, fn):
        self.fn = fn
        t0 = time.perf_counter()
        fn()  # warm-up
        self.calls = max(1, math.ceil(1.0 / max(time.perf_counter() - t0, 1e-6)))
        self.best, self.best_any, self.quiet, self.samples = math.inf, math.inf, 0, 0

    def sample(self):
        # Torch's OpenMP workers keep spinning for a while after a parallel region; a pause
        # lets them block so that they do not compete with the next timer's threads.
        time.sleep(0.5)
        ms, quiet = quiet_sample(self.fn, self.calls)
        self.samples += 1
        self.best_any = min(self.best_any, ms)
        if quiet:
            self.best, self.quiet = min(self.best, ms), self.quiet + 1

    def ms(self):
        return self.best if self.quiet else self.best_any


def kernel_call(lib, dtype_code, causal, q, k, v, out, lse, threads):
    """A closure running the kernel on [B, S, H, D]-indexed views q, k, v, out."""
    b, s, h, d = q.shape
    sb, ss, sh, _ = q.stride()
    args = (dtype_code, int(causal), q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
            lse.data_ptr(), b, h, s, d, sb, ss, sh, threads)

    def run():
        if lib.ejk_bench_flash(*args) < 0:
            raise RuntimeError("ejk_bench_flash rejected its arguments")
    return run


def rel_l2(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True, help="path of libejk_cpu_kernel_bench.so")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--samples", type=int, default=3, help="quiet samples wanted per timing")
    ap.add_argument("--max-rounds", type=int, default=12)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    lib = ctypes.CDLL(args.lib)
    lib.ejk_bench_flash.restype = ctypes.c_int
    lib.ejk_bench_flash.argtypes = [ctypes.c_int, ctypes.c_int] + [ctypes.c_void_p] * 5 + \
        [ctypes.c_int64] * 7 + [ctypes.c_int]
    print(f"torch {torch.__version__}, cpu capability {torch.backends.cpu.get_cpu_capability()}, "
          f"{args.threads} threads; best of >= {args.samples} quiet ~1 s samples per timing")

    b, h, s, d = SHAPE["batch"], SHAPE["heads"], SHAPE["seq"], SHAPE["head_dim"]
    sdpa = torch.nn.functional.scaled_dot_product_attention
    rows = []
    for name, (dtype, code) in DTYPES.items():
        for causal in (False, True):
            q, k, v = (torch.randn(b, h, s, d, dtype=dtype) for _ in range(3))
            ref = sdpa(q, k, v, is_causal=causal)
            lse = torch.empty(b, h, s, dtype=torch.float32)
            # bhsd: torch's tensors through [B, S, H, D] views; bshd: contiguous copies.
            out_hm = torch.empty_like(q)
            views = [t.transpose(1, 2) for t in (q, k, v, out_hm)]
            copies = [t.transpose(1, 2).contiguous() for t in (q, k, v)] + \
                [torch.empty(b, s, h, d, dtype=dtype)]
            timings = {
                "torch": Timing(lambda: sdpa(q, k, v, is_causal=causal)),
                "bshd": Timing(kernel_call(lib, code, causal, *copies, lse, args.threads)),
                "bhsd": Timing(kernel_call(lib, code, causal, *views, lse, args.threads)),
            }
            for _ in range(args.max_rounds):
                if all(t.quiet >= args.samples for t in timings.values()):
                    break
                for t in timings.values():
                    t.sample()
            err = max(rel_l2(copies[3].transpose(1, 2), ref), rel_l2(out_hm, ref))
            rows.append((name, causal, timings, err))

    print(f"\nB={b} H={h} S={s} D={d}; ratio = torch ms / kernel ms (> 1: kernel faster); "
          f"quiet = accepted/total samples")
    print(f"{'dtype':5} {'causal':6} {'torch ms':>9} {'bshd ms':>8} {'ratio':>6} {'bhsd ms':>8} "
          f"{'ratio':>6}  {'quiet t/bshd/bhsd':>17}  rel-L2 vs torch")
    for name, causal, t, err in rows:
        tt, tb, th = t["torch"].ms(), t["bshd"].ms(), t["bhsd"].ms()
        quiet = "/".join(f"{x.quiet}/{x.samples}" for x in t.values())
        print(f"{name:5} {str(causal):6} {tt:9.1f} {tb:8.1f} {tt / tb:6.2f} {th:8.1f} {tt / th:6.2f}"
              f"  {quiet:>17}  {err:.1e}")


if __name__ == "__main__":
    main()
