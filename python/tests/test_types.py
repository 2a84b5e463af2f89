"""ejk.jax checks scalars against their spec types instead of coercing them; every wrong type
or value is a TypeError or ValueError naming the argument (type_cases.py)."""
import jax.numpy as jnp
import pytest

from type_cases import CASES, check
import ejk.jax


def zeros(*shape):
    return jnp.zeros(shape, jnp.float32)


@pytest.mark.parametrize("call, name", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_wrong_types_raise_naming_the_argument(call, name):
    check(call, ejk.jax, zeros, name)


def test_a_wrong_type_is_a_type_error_and_a_value_error():
    q = zeros(1, 8, 2, 64)
    with pytest.raises(TypeError, match="causal: expected a bool, got str 'false'"):
        ejk.jax.flash_attention(q, q, q, causal="false")
    with pytest.raises(ValueError, match="causal"):
        ejk.jax.flash_attention(q, q, q, causal="false")


def test_numpy_scalars_of_the_right_kind_are_accepted():
    import numpy as np
    q = zeros(1, 8, 2, 64)
    out = ejk.jax.flash_attention(q, q, q, causal=np.bool_(True), sliding_window=(np.int64(2), 3),
                                  softmax_scale=np.float32(0.5))
    assert out.shape == q.shape
