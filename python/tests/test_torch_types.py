"""ejk.torch checks scalars against their spec types instead of coercing them, as ejk.jax does
(type_cases.py): every wrong type or value is a TypeError or ValueError naming the argument."""
import pytest

from torch_support import import_torch
from type_cases import CASES, check

torch = import_torch()
import ejk.torch  # noqa: E402


def zeros(*shape):
    return torch.zeros(shape, dtype=torch.float32)


@pytest.mark.parametrize("call, name", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_wrong_types_raise_naming_the_argument(call, name):
    check(call, ejk.torch, zeros, name)


def test_a_wrong_type_is_a_type_error_when_compiled_too():
    q = zeros(1, 8, 2, 64)
    with pytest.raises(TypeError, match="normalize_output: expected a bool"):
        ejk.torch.flash_attention(q, q, q, normalize_output="no")
    with pytest.raises(Exception, match="normalize_output: expected a bool"):
        torch.compile(lambda q: ejk.torch.flash_attention(q, q, q, normalize_output="no"), fullgraph=True)(q)


def test_every_op_is_a_custom_op_with_its_spec_arguments():
    from ejk import _kit
    for op in _kit.op_names():
        s = _kit.spec(op)
        schema = getattr(torch.ops.ejk, op).default._schema
        tune = ["tune"] if s.tuning else []  # an op with tuning axes takes their values last (cfg=)
        assert [a.name for a in schema.arguments] == [p.name for p in s.inputs + s.scalars] + tune, op
        assert [r.name for r in schema.returns] == [p.name for p in s.outputs], op
    assert sorted(ejk.torch.__all__) == sorted(fn.__name__ for m in _kit.op_modules()
                                               for fn in getattr(m, "WRAPPERS", ()))
