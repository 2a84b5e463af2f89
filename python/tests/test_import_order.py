"""jax and ejk imported in either order, then a variant no build has (head_dim 80) compiled by the
CPU JIT plugin and run under jax.jit; also with LLVM loaded (a compile through the C ABI) before
jax is imported. Each order in a fresh process with an empty cache, so the compile happens there;
the compile notice (threshold 0 here) names the key."""
import os
import subprocess
import sys
import textwrap

import pytest

RUN_NEW_VARIANT = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    import ejk.jax
    from ejk.jax import flash_attention
    ejk.jax._jax_lib.ejk_jax_set_compile_notice(0.0)
    q = jnp.asarray(np.random.default_rng(0).standard_normal((1, 40, 2, 80)), jnp.float32)
    out = jax.jit(flash_attention, static_argnames="causal")(q, q, q, causal=True)
    assert np.allclose(out[0, 0], q[0, 0], atol=1e-6)  # the first query sees only the first key
    print("ok")
""")

COMPILE_THROUGH_C_ABI = textwrap.dedent("""
    import ctypes, numpy as np, ejk, ejk._lib as L
    q = np.random.default_rng(1).standard_normal((1, 16, 2, 96)).astype(np.float32)
    out, lse = np.empty_like(q), np.empty((1, 2, 16), np.float32)
    args = L.ArgList()
    for name, a in (("q", q), ("k", q), ("v", q), ("out", out), ("lse", lse)):
        args.tensor(name, a.shape, a.dtype, data=a.ctypes.data)
    array, n = args.array()
    L.raise_for(L.libejk().ejk_run(b"flash_attention", array, n, None), L.libejk())
""")

ORDERS = {
    "jax_first": "import jax\nimport ejk\n" + RUN_NEW_VARIANT,
    "ejk_first": "import ejk\nimport jax\n" + RUN_NEW_VARIANT,
    "llvm_first": COMPILE_THROUGH_C_ABI + RUN_NEW_VARIANT,
}


@pytest.mark.parametrize("order", ORDERS)
def test_import_order_then_compile(order, tmp_path):
    env = dict(os.environ, EJK_CACHE_DIR=str(tmp_path / "cache"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.dirname(os.path.dirname(os.path.abspath(
        __import__("ejk").__file__))), env.get("PYTHONPATH")]))
    r = subprocess.run([sys.executable, "-c", ORDERS[order]], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    assert r.stdout.strip().endswith("ok")
    notices = [line for line in r.stderr.splitlines() if line.startswith("ejk: JIT-compiled flash_fwd.cpu.")]
    assert len(notices) == 1 and ".d80." in notices[0], r.stderr[-2000:]
