"""The seed (``ejkernel``) as an oracle, run in its own Python: EJK_SEED_PYTHON names that
interpreter (default /work/venvs/seed/bin/python where it exists). The seed's module function
runs with platform="xla" on the CPU on the inputs given (NumPy), and its outputs come back as
NumPy arrays. Tests that use it skip where no seed is installed."""
import os
import pathlib
import pickle
import subprocess
import tempfile

_DEFAULT = "/work/venvs/seed/bin/python"

_RUNNER = r"""
import pickle, sys
import jax
jax.config.update("jax_platforms", "cpu")
import jax.numpy as jnp
import ejkernel.modules as m
with open(sys.argv[1], "rb") as f:
    name, args, kwargs = pickle.load(f)
args = [None if a is None else jnp.asarray(a) for a in args]
# Array keywords (bias, sinks, ...) as JAX arrays too: the seed's type checks refuse NumPy ones.
kwargs = {k: jnp.asarray(v) if isinstance(v, __import__("numpy").ndarray) else v for k, v in kwargs.items()}
out = getattr(m, name)(*args, platform="xla", **kwargs)
out = out if isinstance(out, tuple) else (out,)
with open(sys.argv[2], "wb") as f:
    pickle.dump(tuple(__import__("numpy").asarray(o) for o in out), f)
"""


def python():
    """The seed's interpreter, or None where there is none."""
    path = os.environ.get("EJK_SEED_PYTHON", _DEFAULT)
    return path if path and pathlib.Path(path).exists() else None


def run(name, *args, **kwargs):
    """ejkernel.modules.<name>(*args, platform="xla", **kwargs) in the seed's Python; a tuple of
    NumPy arrays (the seed's outputs)."""
    with tempfile.TemporaryDirectory() as d:
        src, dst = pathlib.Path(d, "in.pkl"), pathlib.Path(d, "out.pkl")
        src.write_bytes(pickle.dumps((name, args, kwargs)))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "EJK_", "XLA_"))}
        subprocess.run([python(), "-c", _RUNNER, str(src), str(dst)], check=True, env=env, capture_output=True,
                       timeout=300)
        return pickle.loads(dst.read_bytes())
