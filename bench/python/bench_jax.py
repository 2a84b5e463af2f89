#!/usr/bin/env python3
"""Flash attention forward through ejk.jax under jax.jit, against JAX's cuDNN attention
(jax.nn.dot_product_attention(implementation="cudnn")) in the same process, row by row.

  bench_jax.py [--d 64,128] [--s 1024,4096,16384] [--causal 0,1] [--passes 3] [--out out/bench/python]

bf16, B*S = 16k tokens, H*D = 2048 (the forward grid). Per row: TFLOP/s of N jitted calls back to
back (wall clock from the first dispatch to the last result: the device time when the host keeps
ahead), the same calls inside one jitted loop (no dispatch between them), the ratios to cuDNN,
and host time per call (N dispatches without waiting, median over rounds). A small call (B=1,
S=128, H=16, D=128, causal) shows the host cost where it matters, beside JAX's own dispatch floor
(a jitted call of one elementwise kernel). Prints a table; writes OUT/jax.jsonl.
"""
import argparse
import json
import os
import statistics
import time

import jax
import jax.numpy as jnp

from ejk.jax import flash_attention


def flops(b, s, h, d, causal):
    pairs = s * (s + 1) / 2 if causal else s * s
    return 4.0 * b * h * d * pairs


def inputs(b, s, h, d):
    # Uniform in [-1, 1], as bench/api/bench_api.cpp's: the tensor cores' power (and so the clock)
    # depends on the data, and the two benchmarks are compared.
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    return [jax.random.uniform(k, (b, s, h, d), jnp.bfloat16, -1.0, 1.0) for k in keys]


def attentions(causal):
    return {"ejk": lambda q, k, v: flash_attention(q, k, v, causal=causal),
            "cudnn": lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=causal, implementation="cudnn")}


def candidates(causal):
    return {name: jax.jit(f) for name, f in attentions(causal).items()}


def looped(attention, n):
    """n calls inside one jitted loop, each feeding one element of its output into the next
    query (an in-place update of the carry), so XLA can neither hoist nor merge them: the
    kernel's throughput inside one executable, without JAX's dispatch between calls."""
    def body(_, q, k, v):
        out = attention(q, k, v)
        return q.at[0, 0, 0, 0].set(out[0, 0, 0, 0])

    return jax.jit(lambda q, k, v: jax.lax.fori_loop(0, n, lambda i, q: body(i, q, k, v), q))


def in_loop_s(attention, args, n):
    """Seconds per call of `looped`, median of 5 runs of the loop."""
    f = looped(attention, n)
    jax.block_until_ready(f(*args))
    per = []
    for _ in range(5):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        per.append((time.perf_counter() - t0) / n)
    return statistics.median(per)


def back_to_back_s(f, args, n):
    """Seconds per call of n calls dispatched back to back, median of 5 rounds."""
    per = []
    for _ in range(5):
        jax.block_until_ready(f(*args))
        t0 = time.perf_counter()
        for _ in range(n):
            out = f(*args)
        jax.block_until_ready(out)
        per.append((time.perf_counter() - t0) / n)
    return statistics.median(per)


def host_us(f, args, n=20, rounds=21):
    """Host microseconds per dispatch, the device drained between rounds."""
    per = []
    for _ in range(rounds):
        jax.block_until_ready(f(*args))
        t0 = time.perf_counter()
        for _ in range(n):
            out = f(*args)
        per.append((time.perf_counter() - t0) / n * 1e6)
        jax.block_until_ready(out)
    return statistics.median(per)


def row(d, s, causal):
    b, h = 16384 // s, 2048 // d
    args = inputs(b, s, h, d)
    r = {"d": d, "s": s, "causal": causal}
    n = max(5, 200 * 1024 // s)
    for name, f in candidates(bool(causal)).items():
        try:
            sec = back_to_back_s(f, args, n=n)
            r[name] = flops(b, s, h, d, causal) / sec / 1e12
            r[name + "_in_loop"] = flops(b, s, h, d, causal) / in_loop_s(attentions(bool(causal))[name], args, n) / 1e12
            r[name + "_host_us"] = host_us(f, args)
        except Exception as e:  # a peer without this shape: say so, keep going
            r[name + "_error"] = str(e).splitlines()[0][:200]
    return r


def small_call():
    args = inputs(1, 128, 16, 128)
    # JAX's own dispatch: a jitted call of one tiny elementwise kernel on the same operands.
    r = {"what": "small call b1 s128 h16 d128 causal", "jax_dispatch_floor_us": host_us(jax.jit(lambda q, k, v: q * 2), args, n=200)}
    for name, f in candidates(True).items():
        r[name + "_host_us"] = host_us(f, args, n=200)
        r[name + "_per_call_us"] = back_to_back_s(f, args, n=2000) * 1e6
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", default="64,128")
    ap.add_argument("--s", default="1024,4096,16384")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--out", default="out/bench/python")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    print(jax.devices()[0].device_kind, "jax", jax.__version__)
    rows = [(d, s, c) for d in map(int, a.d.split(",")) for c in map(int, a.causal.split(","))
            for s in map(int, a.s.split(","))]
    results = []
    with open(os.path.join(a.out, "jax.jsonl"), "w") as f:
        small = small_call()
        f.write(json.dumps(small) + "\n")
        print(json.dumps(small))
        for p in range(a.passes):
            for d, s, c in rows:
                r = dict(row(d, s, c), **{"pass": p})
                f.write(json.dumps(r) + "\n")
                results.append(r)
    med = lambda rs, k: statistics.median(x[k] for x in rs) if all(k in x for x in rs) else None
    print(f"{'row':>16} {'ejk':>7} {'cudnn':>7} {'x cuDNN':>7} {'in loop':>7} {'cudnn':>7} {'x cuDNN':>7} "
          f"{'host ejk':>9} {'host cudnn':>10}")
    keys = ("ejk", "cudnn", "ejk_in_loop", "cudnn_in_loop", "ejk_host_us", "cudnn_host_us")
    for d, s, c in rows:
        rs = [x for x in results if (x["d"], x["s"], x["causal"]) == (d, s, c)]
        m = {k: med(rs, k) for k in keys}
        f7 = lambda v: f"{v:7.1f}" if v else "      -"
        ratio = lambda a, b: f"{m[a] / m[b]:.3f}" if m[a] and m[b] else "-"
        print(f"d{d:<3} {'causal' if c else '':6} {s:5} {f7(m['ejk'])} {f7(m['cudnn'])} {ratio('ejk', 'cudnn'):>7} "
              f"{f7(m['ejk_in_loop'])} {f7(m['cudnn_in_loop'])} {ratio('ejk_in_loop', 'cudnn_in_loop'):>7} "
              f"{f7(m['ejk_host_us']):>9} {f7(m['cudnn_host_us']):>10}")


if __name__ == "__main__":
    main()
