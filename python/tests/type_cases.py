"""Scalars and tensors of the wrong type, for ejk.jax and ejk.torch alike (test_types.py,
test_torch_types.py): each call must raise a TypeError or ValueError naming the argument, never
coerce the value (causal="false" is not True) nor fail with an error that names nothing."""

# (id, call(ops, zeros) -> None, the argument the message must name)
CASES = [
    ("causal-str", lambda e, z: e.flash_attention(z(1, 8, 2, 64), z(1, 8, 2, 64), z(1, 8, 2, 64), causal="false"),
     "causal"),
    ("causal-int", lambda e, z: e.flash_attention(z(1, 8, 2, 64), z(1, 8, 2, 64), z(1, 8, 2, 64), causal=1),
     "causal"),
    ("normalize-str", lambda e, z: e.flash_attention(z(1, 8, 2, 64), z(1, 8, 2, 64), z(1, 8, 2, 64),
                                                     normalize_output="no"), "normalize_output"),
    ("window-floats", lambda e, z: e.flash_attention(z(1, 8, 2, 64), z(1, 8, 2, 64), z(1, 8, 2, 64),
                                                     sliding_window=(1.5, 2)), "sliding_window[0]"),
    ("window-bool", lambda e, z: e.flash_attention(z(1, 8, 2, 64), z(1, 8, 2, 64), z(1, 8, 2, 64),
                                                   sliding_window=True), "sliding_window"),
    ("window-triple", lambda e, z: e.flash_attention(z(1, 8, 2, 64), z(1, 8, 2, 64), z(1, 8, 2, 64),
                                                     sliding_window=(1, 2, 3)), "sliding_window"),
    ("scale-str", lambda e, z: e.flash_attention(z(1, 8, 2, 64), z(1, 8, 2, 64), z(1, 8, 2, 64),
                                                 softmax_scale="abc"), "softmax_scale"),
    ("scale-f32-overflow", lambda e, z: e.flash_attention(z(1, 8, 2, 64), z(1, 8, 2, 64), z(1, 8, 2, 64),
                                                          softmax_scale=1e300), "softmax_scale"),
    ("softcap-huge-int", lambda e, z: e.flash_attention(z(1, 8, 2, 64), z(1, 8, 2, 64), z(1, 8, 2, 64),
                                                        logits_soft_cap=2**2000), "logits_soft_cap"),
    ("max-seqlen-2**64", lambda e, z: e.flash_attention_with_lse(z(1, 8, 2, 64), z(1, 8, 2, 64), z(1, 8, 2, 64),
                                                                 max_seqlen_q=2**64), "max_seqlen_q"),
    ("window-2**64", lambda e, z: e.flash_attention(z(1, 8, 2, 64), z(1, 8, 2, 64), z(1, 8, 2, 64),
                                                    sliding_window=2**64), "sliding_window"),
    ("return-state-str", lambda e, z: e.recurrent_attention(z(1, 8, 2, 16), z(1, 8, 2, 16), z(1, 8, 2, 16),
                                                            return_state="yes"), "return_state"),
    ("pool-rank-0", lambda e, z: e.mean_pooling(z()), "x"),
    ("pool-chunk-float", lambda e, z: e.mean_pooling(z(2, 4, 8), chunk_size=1.5), "chunk_size"),
    ("pool-not-array", lambda e, z: e.mean_pooling([[1.0]]), "x"),
    ("merge-rank-0", lambda e, z: e.merge_attention_states(z(), z(), z(), z()), "out_a"),
]


def check(call, ops, zeros, name):
    """call raises TypeError or ValueError whose message starts with `name:` or names it."""
    try:
        call(ops, zeros)
    except (TypeError, ValueError) as e:
        message = str(e)
        assert f"{name}:" in message or f"{name} " in message, message
        return
    raise AssertionError(f"no error: {name} was accepted")
