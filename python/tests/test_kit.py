"""The op kit in ejk.jax: wrappers discovered from ejk/ops/, every op of libejk callable by the
names of its spec through the one FFI handler, signatures and docstrings as the wrappers say."""
import inspect

import jax
import jax.numpy as jnp
import numpy as np

from conftest import assert_close
import ejk.jax
from ejk import _kit


def test_all_is_the_wrappers_of_ejk_ops():
    wrappers = sorted(fn.__name__ for m in _kit.op_modules() for fn in getattr(m, "WRAPPERS", ()))
    assert ejk.jax.__all__ == wrappers
    assert {"flash_attention", "mean_pooling", "merge_attention_states"} <= set(wrappers)


def test_every_op_has_a_spec_with_inputs_and_outputs():
    for op in _kit.op_names():
        s = _kit.spec(op)
        assert s.inputs and s.outputs, op
        for p in s.scalars:
            assert p.type in _kit.KINDS, (op, p)


def test_an_op_without_a_wrapper_runs_by_its_spec_names(rng):
    g = jnp.asarray(rng.standard_normal((3, 16)), jnp.float32)
    dx = jax.jit(lambda g: ejk.jax._FW.call("mean_pooling_backward", g=g, num_tokens=5)["dx"])(g)
    assert dx.shape == (3, 5, 16)
    assert_close(dx, np.broadcast_to(np.asarray(g)[:, None, :] / 5, (3, 5, 16)))


def test_signatures_and_docstrings_are_the_wrappers():
    sig = inspect.signature(ejk.jax.flash_attention)
    assert list(sig.parameters)[:3] == ["query", "key", "value"]
    assert "fw" not in sig.parameters
    for name in ejk.jax.__all__:
        doc = getattr(ejk.jax, name).__doc__
        assert doc and "{" not in doc, name
        assert getattr(ejk.jax, name).__module__ == "ejk.jax"
    assert "shard_map" in ejk.jax.flash_attention.__doc__


def test_an_unknown_argument_name_is_a_type_error():
    import pytest
    with pytest.raises(TypeError, match="mean_pooling: no argument 'y'"):
        ejk.jax._FW.call("mean_pooling", x=jnp.zeros((1, 2, 8)), y=1)


def test_the_shared_files_name_no_op():
    """Adding an op touches ejk/ops/ only: python/src and the shared modules' code (docstrings
    aside, which show examples) name none."""
    import ast
    import pathlib
    root = pathlib.Path(ejk.jax.__file__).resolve().parent
    names = _kit.op_names()
    for path in sorted((root.parent / "src").iterdir()):
        text = path.read_text()
        assert not [op for op in names if op in text], path
    for path in sorted(root.glob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body
                      and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
        code = [n for n in ast.walk(tree) if isinstance(n, (ast.Constant, ast.Name, ast.Attribute, ast.arg))
                and id(n) not in docstrings]
        words = {getattr(n, "value", None) or getattr(n, "id", None) or getattr(n, "attr", None) or
                 getattr(n, "arg", None) for n in code}
        found = [op for op in names for w in words if isinstance(w, str) and op in w]
        assert not found, (path, found)
