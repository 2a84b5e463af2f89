#!/usr/bin/env python3
"""ejk.jax.ring_attention on one GPU, under its own shard_map over a mesh of that one device,
against ejk.jax.flash_attention on the same arrays: the output (rel-L2; a ring of one is one
flash call, so 0 is expected) and the overhead, forward and forward + backward (jax.grad of a
sum), each jitted and called back to back (bench_jax.back_to_back_s), ring and flash rounds
interleaved.

  ring_one_gpu_jax.py        (run from the repository root with ejk importable and JAX on a GPU)
"""
import statistics

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec as P

from bench_jax import back_to_back_s  # n jitted calls back to back, median of 5 rounds
from ejk.jax import flash_attention, ring_attention

SHAPES = ((2, 4096, 16, 128, True), (1, 8192, 16, 128, False), (4, 2048, 32, 64, True))


def per_call_ms(fs, args, n=40, rounds=3):
    """Milliseconds per call of each function: rounds of back_to_back_s, interleaved, median."""
    per = {name: [] for name in fs}
    for _ in range(rounds):
        for name, f in fs.items():
            per[name].append(back_to_back_s(f, args, n) * 1e3)
    return {name: statistics.median(t) for name, t in per.items()}


def main():
    gpu = jax.devices()[0]  # the GPU where JAX has one
    mesh = Mesh([gpu], ("sp",))
    seq = P(None, "sp")
    for b, s, h, d, causal in SHAPES:
        keys = jax.random.split(jax.random.PRNGKey(0), 3)
        q, k, v = (jax.device_put(jax.random.normal(x, (b, s, h, d), jnp.bfloat16), gpu) for x in keys)
        ring = lambda q, k, v: ring_attention(q, k, v, axis_name="sp", causal=causal, mesh=mesh,  # noqa: E731
                                              in_specs=(seq,) * 3 + (None, None), out_specs=seq)
        flash = lambda q, k, v: flash_attention(q, k, v, causal=causal)  # noqa: E731
        grad = lambda f: jax.jit(jax.grad(lambda *a: f(*a).astype(jnp.float32).sum(), argnums=(0, 1, 2)))  # noqa: E731
        fs = {"ring": jax.jit(ring), "flash": jax.jit(flash)}
        a, w = (fs[n](q, k, v).astype(jnp.float32) for n in ("ring", "flash"))
        err = float(jnp.linalg.norm(a - w) / jnp.linalg.norm(w))
        t = per_call_ms(fs, (q, k, v))
        t |= {f"{n}_step": ms for n, ms in per_call_ms({n: grad(f) for n, f in (("ring", ring), ("flash", flash))},
                                                      (q, k, v)).items()}
        print(f"B{b} S{s} H{h} D{d} causal={causal}: rel_l2 {err:.2e}; forward flash {t['flash']:.3f} ms, ring "
              f"{t['ring']:.3f} ms (x{t['ring'] / t['flash']:.3f}); forward+backward flash {t['flash_step']:.3f} ms, "
              f"ring {t['ring_step']:.3f} ms (x{t['ring_step'] / t['flash_step']:.3f})", flush=True)


if __name__ == "__main__":
    main()
