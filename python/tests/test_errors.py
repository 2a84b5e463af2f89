"""Bad calls raise when traced: ValueError with libejk's message naming the argument, and
NotImplementedError naming what ejkernel does not implement."""
import re

import jax
import jax.numpy as jnp
import pytest

from ejk.jax import flash_attention, flash_attention_with_lse, mean_pooling, merge_attention_states


def zeros(*shape, dtype=jnp.float32):
    return jnp.zeros(shape, dtype)


@pytest.mark.parametrize("call, message", [
    (lambda: flash_attention(zeros(1, 8, 2, 64), zeros(1, 8, 2, 32), zeros(1, 8, 2, 32)),
     "k: dim 3 (D) must be 64 as in q, got 32"),
    (lambda: flash_attention(zeros(1, 8, 3, 64), zeros(1, 8, 2, 64), zeros(1, 8, 2, 64)),
     "k: number of kv heads (2) must divide the number of q heads (3)"),
    (lambda: flash_attention(zeros(1, 8, 2, 64), zeros(1, 8, 2, 64), zeros(1, 8, 2, 64, dtype=jnp.bfloat16)), "v:"),
    (lambda: flash_attention(zeros(1, 8, 2, 64), zeros(1, 8, 2, 64), zeros(1, 8, 2, 64), sliding_window=(-1, 2)),
     "sliding_window"),
    (lambda: flash_attention(zeros(1, 8, 2, 64), zeros(1, 8, 2, 64), zeros(1, 8, 2, 64), sliding_window="wide"),
     "sliding_window"),
    (lambda: flash_attention_with_lse(zeros(1, 8, 2, 64), zeros(1, 8, 2, 64), zeros(1, 8, 2, 64),
                                      q_segment_ids=zeros(1, 8, dtype=jnp.int32)), "kv_segment_ids"),
    (lambda: flash_attention(zeros(1, 8, 2, 64), zeros(1, 8, 2, 64), zeros(1, 8, 2, 64), None, None, None,
                             zeros(2, 2, 2)), "softmax_aux"),
    (lambda: flash_attention(zeros(1, 8, 2, 64, dtype=jnp.complex64), zeros(1, 8, 2, 64), zeros(1, 8, 2, 64)),
     "q: dtype complex64"),
    (lambda: mean_pooling(zeros(4, 8), jnp.zeros(3, jnp.float32)), "cu_seqlens"),
    (lambda: merge_attention_states(zeros(2, 4, 8), zeros(4, 3), zeros(2, 4, 8), zeros(4, 2)), "lse_a"),
])
def test_bad_arguments_raise_value_error_naming_them(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        jax.block_until_ready(call())


def test_checks_run_when_traced_under_jit():
    f = jax.jit(lambda q, k: flash_attention(q, k, k))
    with pytest.raises(ValueError, match="k: dim 3"):
        f.lower(zeros(1, 8, 2, 64), zeros(1, 8, 2, 32))


def test_a_traced_option_is_a_value_error():
    f = jax.jit(lambda q, scale: flash_attention(q, q, q, softmax_scale=scale))
    with pytest.raises(ValueError, match="softmax_scale: expected a Python float known when tracing"):
        jax.block_until_ready(f(zeros(1, 8, 2, 64), 0.5))


@pytest.mark.parametrize("kwargs, names", [
    (dict(platform="pallas"), "platform: 'pallas'"),
])
def test_unsupported_options_raise_not_implemented(kwargs, names):
    q = zeros(1, 8, 2, 64)
    with pytest.raises(NotImplementedError, match=names):
        jax.block_until_ready(flash_attention(q, q, q, **kwargs))
