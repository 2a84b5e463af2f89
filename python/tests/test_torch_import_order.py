"""torch and ejk imported in either order (libejk loaded privately, then libejk_torch bound to
that copy), then a variant no build has (head_dim 80) compiled by the CPU JIT plugin and run
through torch.ops.ejk; also ejk.jax and ejk.torch in one process, where jax is installed. Each in
a fresh process with an empty cache, so the compile happens there; the compile notice
(threshold 0 here) names the key once. Without a CPU JIT (a build without LLVM) a built-in
head_dim runs instead, and no notice is expected."""
import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

from torch_support import import_torch, no_cpu_jit

import_torch()
from ejk import library_dir  # noqa: E402

RUN_NEW_VARIANT = textwrap.dedent("""
    import torch
    import ejk.torch
    from ejk.torch import flash_attention
    ejk.torch._torch_lib.ejk_torch_set_compile_notice(0.0)
    import os
    q = torch.randn(1, 128, 2, int(os.environ["EJK_TEST_HEAD_DIM"]))
    out = flash_attention(q, q, q, causal=True)
    assert torch.allclose(out[0, 0], q[0, 0], atol=1e-6)  # the first query sees only the first key
    print("ok")
""")

WITH_JAX = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    import ejk.jax
    x = jnp.asarray(np.random.default_rng(0).standard_normal((2, 6, 8)), jnp.float32)
    assert np.allclose(jax.jit(ejk.jax.mean_pooling)(x), np.asarray(x).mean(axis=1), atol=1e-6)
""")

ORDERS = {
    "torch_first": "import torch\nimport ejk\n" + RUN_NEW_VARIANT,
    "ejk_first": "import ejk\nimport torch\n" + RUN_NEW_VARIANT,
    "jax_then_torch": WITH_JAX + RUN_NEW_VARIANT,
}


@pytest.mark.parametrize("order", ORDERS)
def test_import_order_then_compile(order, tmp_path):
    if order == "jax_then_torch" and importlib.util.find_spec("jax") is None:
        pytest.skip("jax is not installed: ejk.jax and ejk.torch in one process not tried")
    if order == "jax_then_torch" and not (library_dir() / "libejk_jax.so").exists():
        pytest.skip(f"no libejk_jax.so in {library_dir()}: ejk.jax and ejk.torch in one process not tried")
    env = dict(os.environ, EJK_CACHE_DIR=str(tmp_path / "cache"), EJK_TEST_HEAD_DIM="64" if no_cpu_jit() else "80")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.dirname(os.path.dirname(os.path.abspath(
        __import__("ejk").__file__))), env.get("PYTHONPATH")]))
    r = subprocess.run([sys.executable, "-c", ORDERS[order]], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    assert r.stdout.strip().endswith("ok")
    notices = [line for line in r.stderr.splitlines() if line.startswith("ejk: JIT-compiled flash_fwd.cpu.")]
    if no_cpu_jit():
        assert not notices, r.stderr[-2000:]
    else:
        assert len(notices) == 1 and ".d80." in notices[0], r.stderr[-2000:]
