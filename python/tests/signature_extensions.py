"""Keyword-only arguments ejk adds to a seed op's signature (each defaulting to None, so every
call the seed takes means the same here): op -> names. The signature tests drop these before
comparing with the seed and check they are keyword-only with a None default."""
_VARLEN = {"cu_seqlens"}
EXTENSIONS = {name: _VARLEN for name in ("state_space_v1", "ssm1", "mamba1", "state_space_v2", "ssm2", "mamba2")}
# Segment ids without a MaskInfo (which needs JAX): torch's way to give them, JAX's too.
EXTENSIONS["ring_attention"] = {"q_segment_ids", "kv_segment_ids"}


def seed_part(name, params):
    """params (inspect.Parameter) of op `name` without its extensions, which must be
    keyword-only and default to None."""
    extra = EXTENSIONS.get(name, set())
    for p in params:
        if p.name in extra:
            assert p.kind.name == "KEYWORD_ONLY" and p.default is None, (name, p.name)
    assert extra <= {p.name for p in params}, (name, extra)
    return [p for p in params if p.name not in extra]
