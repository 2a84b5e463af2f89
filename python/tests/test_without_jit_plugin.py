"""The package without a working CPU JIT plugin (a machine without LLVM 19): built-in variants
run, and a new one fails naming its key and the missing plugin, and a plugin that is there but
does not load by what the loader said. libejk and libejk_jax are copied to a directory of their
own, in a fresh process."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import ejk

SCRIPT = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    from ejk.jax import flash_attention, mean_pooling
    x = jnp.ones((2, 8, 32), jnp.float32)
    assert np.allclose(mean_pooling(x), 1.0)  # built in
    q = jnp.ones((1, 8, 2, 80), jnp.float32)  # head_dim 80: never built in
    try:
        flash_attention(q, q, q).block_until_ready()
    except Exception as e:
        print(e)
""")


@pytest.mark.parametrize("plugin", ["absent", "broken"])
def test_a_new_variant_names_its_key_and_the_missing_plugin(tmp_path, plugin):
    libs = tmp_path / "lib"
    libs.mkdir()
    for name in ("libejk.so.0", "libejk_jax.so"):
        shutil.copy(ejk.library_dir() / name, libs / name)
    if plugin == "broken":
        (libs / "libejk_cpu_jit.so").write_bytes(b"not an ELF file")
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(ejk.__file__)))
    env = dict(os.environ, EJK_LIBRARY_DIR=str(libs), EJK_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])))
    env.pop("LD_LIBRARY_PATH", None)
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "variant flash_fwd.cpu." in r.stdout and ".d80." in r.stdout, r.stdout
    assert "is not built in, and the CPU JIT plugin (libejk_cpu_jit.so, which needs LLVM 19) is not installed" \
        in r.stdout, r.stdout
    if plugin == "broken":
        assert f"{libs}/libejk_cpu_jit.so: " in r.stdout, r.stdout
