"""flash_attention under jax.shard_map (mesh=, in_specs=, out_specs=) on 4 virtual CPU devices,
sharded over batch, heads, and both on a 2x2 mesh, against the float64 reference and the
unsharded call. XLA reads the device count (XLA_FLAGS) once, when jax starts its backend, so
each case runs in a fresh process: this module run as a script with the case's name; the other
modules in the pytest process keep their one device."""
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, PartitionSpec as P

import reference
from conftest import assert_close
from ejk.jax import flash_attention, flash_attention_with_lse
from ejk.types import MaskInfo

DEVICES = 4
NO_SPEC = (None,) * 4  # in_specs past query, key, value: bias, softmax_aux, cum_seqlens_q, cum_seqlens_k


def normal(rng, *shape):
    return jnp.asarray(rng.standard_normal(shape), jnp.float32)


def mesh_of(shape, names):
    assert len(jax.devices()) == DEVICES, jax.devices()
    return Mesh(np.array(jax.devices()).reshape(shape), names)


def same_spec(a, b):
    """Equal but for trailing Nones, which jax drops."""
    return tuple(a) + (None,) * (len(b) - len(a)) == tuple(b) + (None,) * (len(a) - len(b))


def local_call_in_hlo(f, args, local_q_shape):
    """The compiled program calls the kernel once, on a local shard of query's shape."""
    text = jax.jit(f).lower(*args).compile().as_text()
    assert text.count('custom_call_target="ejk_call"') == 1, text
    assert 'op = "flash_attention"' in text, text
    assert "f32[" + ",".join(map(str, local_q_shape)) + "]" in text, text


def case_batch():
    """Batch over 4 devices, with bias and segment ids sharded alike (given, or from mask_info as
    the seed shards them); out and lse, jit and eager."""
    rng = np.random.default_rng(0)
    mesh = mesh_of((4,), ("data",))
    q, k, v = normal(rng, 4, 24, 4, 64), normal(rng, 4, 40, 2, 64), normal(rng, 4, 40, 2, 64)
    bias = normal(rng, 4, 4, 24, 40)
    q_seg = jnp.asarray(rng.integers(0, 2, (4, 24)), jnp.int32)
    kv_seg = jnp.asarray(rng.integers(0, 2, (4, 40)), jnp.int32)
    spec, rows = P("data", None, None, None), P("data", None)
    in_specs = (spec, spec, spec, spec, None, None, None, rows, rows)

    def sharded(q, k, v, bias, q_seg, kv_seg):
        return flash_attention_with_lse(q, k, v, bias, q_segment_ids=q_seg, kv_segment_ids=kv_seg, causal=True,
                                        mesh=mesh, in_specs=in_specs, out_specs=spec)

    args = (q, k, v, bias, q_seg, kv_seg)
    out, lse = jax.jit(sharded)(*args)
    assert same_spec(out.sharding.spec, spec) and out.shape == q.shape and lse.shape == (4, 4, 24)
    want = reference.flash_attention(q, k, v, bias=bias, q_segment_ids=q_seg, kv_segment_ids=kv_seg, causal=True)
    assert_close(out, want[0])
    assert_close(lse, want[1])
    whole = flash_attention_with_lse(q, k, v, bias, q_segment_ids=q_seg, kv_segment_ids=kv_seg, causal=True)
    assert_close(out, whole[0])
    info = MaskInfo.from_segments(q_seg, kv_seg, batch_axis_name="data", qheads_axis_name=None,
                                  kvheads_axis_name=None, sequence_axis_name=None)
    seed_form = jax.jit(lambda q, k, v, bias, info: flash_attention(
        q, k, v, bias, mask_info=info.apply_causal(), mesh=mesh, in_specs=in_specs[:7], out_specs=spec))
    assert_close(seed_form(q, k, v, bias, info), whole[0])
    assert_close(lse, whole[1])
    assert_close(sharded(*args)[0], whole[0])  # eager: shard_map without jit
    local_call_in_hlo(sharded, args, (1, 24, 4, 64))


def case_heads():
    """Heads over 4 devices: GQA (k, v's heads split alike), per-head sinks, window, soft cap; the
    (out, lse) pair of specs; packed varlen over heads."""
    rng = np.random.default_rng(1)
    mesh = mesh_of((4,), ("model",))
    q, k, v = normal(rng, 2, 32, 8, 64), normal(rng, 2, 32, 4, 64), normal(rng, 2, 32, 4, 64)
    sinks = normal(rng, 8, 2)
    spec = P(None, None, "model", None)
    in_specs = (spec, spec, spec, None, P("model", None), None, None)
    options = dict(sliding_window=(6, 2), logits_soft_cap=20.0)
    f = jax.jit(lambda q, k, v, s: flash_attention_with_lse(q, k, v, None, None, None, s, mesh=mesh,
                                                            in_specs=in_specs, out_specs=(spec, P(None, "model", None)),
                                                            **options))
    out, lse = f(q, k, v, sinks)
    want = reference.flash_attention(q, k, v, softmax_aux=sinks, **options)
    assert_close(out, want[0])
    assert_close(lse, want[1])
    local_call_in_hlo(f, (q, k, v, sinks), (2, 32, 2, 64))

    tq = normal(rng, 30, 8, 64)
    cu = jnp.asarray([0, 12, 30], jnp.int32)
    packed = P(None, "model", None)
    varlen_specs = (packed, packed, packed, None, None, P(), P())
    out, lse = jax.jit(lambda x: flash_attention_with_lse(x, x, x, None, cu, cu, causal=True, mesh=mesh,
                                                          in_specs=varlen_specs, out_specs=packed))(tq)
    want = reference.flash_attention(tq, tq, tq, cum_seqlens_q=cu, cum_seqlens_k=cu, causal=True)
    assert lse.shape == (1, 8, 30)
    assert_close(out, want[0])
    assert_close(lse, want[1])


def case_mesh_2x2():
    """Batch over one mesh axis and heads over the other, in bfloat16, against the unsharded call."""
    rng = np.random.default_rng(2)
    mesh = mesh_of((2, 2), ("data", "model"))
    q, k, v = (normal(rng, 2, 48, 4, 128).astype(jnp.bfloat16) for _ in range(3))
    spec = P("data", None, "model", None)
    f = jax.jit(lambda q, k, v: flash_attention(q, k, v, causal=True, mesh=mesh, in_specs=(spec,) * 3 + NO_SPEC,
                                                out_specs=spec))
    out = f(q, k, v)
    assert out.dtype == jnp.bfloat16 and same_spec(out.sharding.spec, spec)
    assert_close(out, reference.flash_attention(q, k, v, causal=True)[0], "bfloat16")
    assert_close(out, flash_attention(q, k, v, causal=True), "bfloat16")


def case_bad_specs():
    """Bad specs raise ValueError naming the argument; a mesh without both specs runs unsharded,
    as in ejkernel.modules."""
    rng = np.random.default_rng(3)
    mesh = mesh_of((2, 2), ("data", "model"))
    q = normal(rng, 2, 16, 4, 64)
    spec = P("data", None, "model", None)
    good = dict(mesh=mesh, in_specs=(spec,) * 3 + NO_SPEC, out_specs=spec)

    def raises(match, **changes):
        with pytest.raises(ValueError, match=match):
            jax.block_until_ready(flash_attention(q, q, q, **{**good, **changes}))

    raises(r"in_specs: expected 7 PartitionSpecs .* query, key, value, bias, softmax_aux", in_specs=(spec,) * 3)
    raises(r"in_specs: expected 7", in_specs=spec)
    raises(r"in_specs\[1\] \(key\): expected a jax.sharding.PartitionSpec", in_specs=(spec, "x", spec) + NO_SPEC)
    raises(r"in_specs\[2\] \(value\): .* names mesh axis 'heads', which the mesh lacks",
           in_specs=(spec, spec, P(None, None, "heads")) + NO_SPEC)
    raises(r"in_specs\[0\] \(query\): .* has 5 entries for an array of rank 4",
           in_specs=(P("data", None, None, None, None), spec, spec) + NO_SPEC)
    raises(r"in_specs\[0\] \(query\): .* splits axis 0 \(size 2\) into 4 parts",
           in_specs=(P(("data", "model")), spec, spec) + NO_SPEC)
    raises(r"out_specs: expected P\('data', None, 'model', None\), as query's", out_specs=P("data"))
    raises(r"out_specs: expected a PartitionSpec for the output; got", out_specs=(spec, P("data", "model")))
    with pytest.raises(ValueError, match=r"out_specs\[1\] \(lse\): expected P\('data', 'model', None\)"):
        jax.block_until_ready(flash_attention_with_lse(q, q, q, **{**good, "out_specs": (spec, P("data", None, "model"))}))
    raises(r"mesh: expected a jax.sharding.Mesh, got dict", mesh={"data": 2})
    with pytest.raises(ValueError, match=r"^flash_attention: k: "):  # libejk's own check, on the global shapes
        jax.block_until_ready(flash_attention(q, q[..., :32], q, **good))
    with pytest.raises(ValueError, match=r"in_specs\[1\] \(key\): .* splits axis 0 \(size 3\) into 2 parts"):
        jax.block_until_ready(flash_attention(q, jnp.concatenate([q, q[:1]]), q, **good))
    unsharded = flash_attention(q, q, q, mesh=mesh, in_specs=good["in_specs"])
    assert isinstance(unsharded.sharding, jax.sharding.SingleDeviceSharding)


@pytest.mark.parametrize("case", [case_batch, case_heads, case_mesh_2x2, case_bad_specs], ids=lambda c: c.__name__)
def test_shard_map(case):
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules["ejk"].__file__)))
    env = dict(os.environ, XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} "
                                     f"--xla_force_host_platform_device_count={DEVICES}".strip(),
               JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, os.path.abspath(__file__), case.__name__], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]


if __name__ == "__main__":
    globals()[sys.argv[1]]()
