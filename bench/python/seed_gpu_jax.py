#!/usr/bin/env python3
"""The seed's XLA path on the GPU against ejk.jax, for the sequence ops the issues compare with
it: the same arguments to `ejkernel.modules.<op>(..., platform="xla")` and `ejk.jax.<op>`, each
under jax.jit, forward and forward + backward (jax.grad of the output's float32 sum over every
floating input), called back to back (bench_jax.back_to_back_s, median of rounds).

  seed_gpu_jax.py [--ops gated_delta_rule,lightning_attention,state_space_v1,state_space_v2]

The seed (ejkernel==0.0.80.3 and its pure-Python dependencies) must be importable. A call the
seed cannot make (its errors under jit or grad) is printed with the error and skipped.
"""
import argparse
import os

import jax
import jax.numpy as jnp

os.environ.setdefault("EJKERNEL_AUTOTUNE_POLICY", "heuristics")  # the seed times candidates otherwise
import ejk.jax as ours  # noqa: E402
from bench_jax import back_to_back_s

B, T = 2, 4096


def normal(key, shape, dtype=jnp.bfloat16, scale=1.0):
    return (jax.random.normal(key, shape, jnp.float32) * scale).astype(dtype)


def gdn_args(keys):
    h, d = 16, 128
    q, k, v = (normal(keys[i], (B, T, h, d)) for i in range(3))
    beta = jax.nn.sigmoid(normal(keys[3], (B, T, h), jnp.float32)).astype(jnp.bfloat16)
    decay = jax.nn.log_sigmoid(normal(keys[4], (B, T, h), jnp.float32) + 3).astype(jnp.bfloat16)
    return (q, k, v, beta, decay), dict(use_qk_l2norm=True)


def lightning_args(keys):
    q, k, v = (normal(keys[i], (B, T, 16, 128)) for i in range(3))
    return (q, k, v), dict(layer_idx=3, num_layers=8)


def ssm1_args(keys):
    d, n = 2048, 16
    x, gate = normal(keys[0], (B, T, d)), normal(keys[1], (B, T, d))
    bm, cm = normal(keys[2], (B, T, n)), normal(keys[3], (B, T, n))
    dt = jax.nn.softplus(normal(keys[4], (B, T, d), jnp.float32) - 2).astype(jnp.bfloat16)
    a = -jax.random.uniform(keys[5], (d, n), jnp.float32, 0.5, 4.5)
    return (x, a, bm, cm, normal(keys[6], (d,), jnp.float32), dt, gate), {}


def ssm2_args(keys):
    h, p, n = 64, 64, 128
    x = normal(keys[0], (B, T, h, p))
    bm, cm = normal(keys[1], (B, T, 1, n)), normal(keys[2], (B, T, 1, n))
    dt = jax.nn.softplus(normal(keys[3], (B, T, h), jnp.float32) - 2).astype(jnp.bfloat16)
    a = -jax.random.uniform(keys[4], (h,), jnp.float32, 0.5, 4.5)
    return (x, a, bm, cm, normal(keys[5], (h,), jnp.float32), dt), dict(n_groups=1)


ARGS = {"gated_delta_rule": gdn_args, "lightning_attention": lightning_args, "state_space_v1": ssm1_args,
        "state_space_v2": ssm2_args}


def first(out):
    return out[0] if isinstance(out, tuple) else out


def functions(op, kwargs, floats):
    import ejkernel.modules as seed
    impls = {"seed": lambda *a: first(getattr(seed, op)(*a, platform="xla", **kwargs)),
             "ejk": lambda *a: first(getattr(ours, op)(*a, **kwargs))}

    def loss(f):
        return lambda *a: f(*a).astype(jnp.float32).sum()

    fwd = {n: jax.jit(f) for n, f in impls.items()}
    step = {n: jax.jit(jax.grad(loss(f), argnums=floats)) for n, f in impls.items()}
    return fwd, step


def timed(f, args):
    try:
        jax.block_until_ready(f(*args))
        return back_to_back_s(f, args, 5) * 1e3, ""
    except Exception as e:  # the seed's own failures under jit/grad are reported, not fatal
        return None, f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ops", default=",".join(ARGS))
    args = ap.parse_args()
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}; B {B}, T {T}, bf16")
    for op in args.ops.split(","):
        xs, kwargs = ARGS[op](jax.random.split(jax.random.PRNGKey(0), 8))
        floats = tuple(i for i, x in enumerate(xs) if jnp.issubdtype(x.dtype, jnp.floating))
        fwd, step = functions(op, kwargs, floats)
        for name, fs in (("forward", fwd), ("forward+backward", step)):
            t = {n: timed(f, xs) for n, f in fs.items()}
            (ms_seed, why_seed), (ms_ejk, why_ejk) = t["seed"], t["ejk"]
            line = f"{op:<20} {name:<17} ejk {ms_ejk if ms_ejk is None else f'{ms_ejk:.3f} ms'}"
            line += f", seed {ms_seed if ms_seed is None else f'{ms_seed:.3f} ms'}"
            if ms_seed and ms_ejk:
                line += f", seed/ejk {ms_seed / ms_ejk:.1f}x"
            print(line + "".join(f" [{w}]" for w in (why_ejk, why_seed) if w), flush=True)


if __name__ == "__main__":
    main()
