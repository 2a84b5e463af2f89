"""ejk.ops: ejkernel.ops' names for config selection on libejk's engine. overlay_cache gives the
calls traced inside it tuning values (innermost first, an explicit cfg= wins); the autotune
policy turns libejk's in-call autotuning on or off, for the forward ops or (validate_backward)
the backward ops too; the seed's names without a counterpart raise NotImplementedError."""
import os
import pathlib
import uuid

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ejk.jax
import ejk.ops
from ejk import _kit

# ejkernel.ops.__all__ and ejkernel.ops.config.__all__ of the seed (0.0.80.3).
SEED_NAMES = [
    "AutotuneData", "AutotunePolicy", "Autotuner", "AutotuningResult", "BwdParams", "Cfg", "ConfigCache",
    "ConfigChooser", "ConfigSelectorChain", "Entry", "Executor", "FNAutotuner", "FwdParams", "Invocation", "Kernel",
    "Measurement", "Out", "PersistentCache", "Tuner", "abstractify", "autotune", "autotune_recorded", "benchmark",
    "default_key_builder_with_sharding", "device_fingerprint", "device_kind", "extract_labels_from_hlo_text",
    "find_labels_in_lowered", "forward_autotune_only", "from_json", "get_device_platform", "get_invocations",
    "label", "labels_to_configs", "log_autotune_progress", "overlay_cache", "pmap_with_config", "policy_override",
    "record_invocation", "set_autotune_progress", "sharding_fingerprint", "short_hash", "stable_json", "to_json",
    "vmap_with_config"]
HONOURED = {"AutotunePolicy", "BwdParams", "Cfg", "FwdParams", "Out", "forward_autotune_only", "overlay_cache",
            "policy_override"}


def _qkv(sq=40, sk=56, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(jnp.asarray(rng.standard_normal(s), jnp.float32) for s in ((1, sq, 2, 64), (1, sk, 1, 64),
                                                                             (1, sk, 1, 64)))


@pytest.fixture(autouse=True)
def process_policy():
    """Each test leaves libejk following EJK_AUTOTUNE again."""
    yield
    ejk.ops.set_autotune_policy(None)


def test_every_seed_name_exists_and_the_unsupported_ones_say_so():
    assert set(SEED_NAMES) <= set(ejk.ops.__all__)
    for name in sorted(set(SEED_NAMES) - HONOURED):
        with pytest.raises(NotImplementedError, match=f"ejk.ops.{name}:"):
            getattr(ejk.ops, name)()
    # The policy module is not an op module, and its names are not ops.
    assert all(not m.__name__.split(".")[-1].startswith("_") for m in _kit.op_modules())
    assert "overlay_cache" not in ejk.jax.__all__


def test_an_overlay_gives_its_ops_tuning_values_innermost_first_and_cfg_wins():
    q, k, v = _qkv()
    base = ejk.jax.flash_attention(q, k, v)
    with ejk.ops.overlay_cache({"flash_attention": {"block_q": 7}}):  # reaches libejk, which refuses it
        with pytest.raises(ValueError, match="block_q"):
            ejk.jax.flash_attention(q, k, v)
        got = ejk.jax.flash_attention(q, k, v, cfg={"block_q": 32})  # the call's own cfg wins
        assert float(jnp.linalg.norm(got - base) / jnp.linalg.norm(base)) <= 1e-5
        with ejk.ops.overlay_cache({"flash_attention": {"block_q": 32, "block_k": 32}}):
            jaxpr = str(jax.make_jaxpr(lambda q: ejk.jax.flash_attention(q, k, v))(q))
            assert "block_q" in jaxpr and "block_k" in jaxpr
    assert "block_q" not in str(jax.make_jaxpr(lambda q: ejk.jax.flash_attention(q, k, v))(q))


def test_the_gradient_takes_the_backward_ops_overlay_not_the_forwards():
    q, k, v = _qkv(seed=1)

    def loss(q):
        return jnp.sum(ejk.jax.flash_attention(q, k, v, causal=True) ** 2)

    want = jax.grad(loss)(q)
    with ejk.ops.overlay_cache({"flash_attention": {"block_q": 32, "block_k": 32}}):
        got = jax.grad(loss)(q)  # the forward's values do not reach the backward
    assert float(jnp.linalg.norm(got - want) / jnp.linalg.norm(want)) <= 1e-5
    with ejk.ops.overlay_cache({"flash_attention_backward": {"block_q": 7}}):
        ejk.jax.flash_attention(q, k, v)
        with pytest.raises(ValueError, match="block_q"):
            jax.grad(loss)(q)


@pytest.mark.parametrize("mapping, error, words", [
    ({"flash_atention": {"block_q": 64}}, ValueError, "'flash_atention' is not an op"),
    ({("cpu", "flash_attention", "key"): {"block_q": 64}}, NotImplementedError, "op_id, call_key"),
    ({"mean_pooling": {"block_q": 64}}, ValueError, "cfg: mean_pooling has no tuning axes"),
    ({"flash_attention": {"block_z": 64}}, ValueError, "'block_z' is not a tuning axis"),
    ({"flash_attention": "block_q=64"}, TypeError, "cfg: expected a mapping"),
    (["flash_attention"], TypeError, "mapping: expected a mapping"),
])
def test_a_bad_overlay_is_refused_when_made(mapping, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(")):
        ejk.ops.overlay_cache(mapping)


def test_policies_map_onto_libejks_autotune_setting():
    forward_ops = ejk.ops._policy.engine_setting(ejk.ops.AutotunePolicy())
    assert "flash_attention" in forward_ops.split(",") and "backward" not in forward_ops
    assert ejk.ops._policy.engine_setting(ejk.ops.AutotunePolicy(validate_backward=True)) == "1"
    assert ejk.ops._policy.engine_setting(ejk.ops.AutotunePolicy(cache_miss_fallback="heuristics")) == "0"
    assert ejk.ops._policy.engine_setting(ejk.ops.AutotunePolicy(allow_autotune=False)) == "0"
    ejk.ops.set_autotune_policy("autotune")
    assert ejk.ops.get_autotune_policy().validate_backward
    with ejk.ops.policy_override(cache_miss_fallback="heuristics"):
        assert not ejk.ops.get_autotune_policy().autotunes()
    assert ejk.ops.get_autotune_policy().autotunes()
    with pytest.raises(ValueError, match="cache_miss_fallback"):
        ejk.ops.set_autotune_policy(ejk.ops.AutotunePolicy(cache_miss_fallback="always"))
    with pytest.raises(NotImplementedError, match="allow_heuristics"):
        ejk.ops.set_autotune_policy(ejk.ops.AutotunePolicy(allow_heuristics=False))
    with pytest.raises(NotImplementedError, match="selector"):
        ejk.ops.policy_override(object(), allow_autotune=False)
    with pytest.raises(TypeError, match="no policy field"):
        ejk.ops.policy_override(allow_everything=True)


def _records():
    """The tuning store's records of the two ops (filed by kernel family): {op: count}."""
    store = pathlib.Path(os.environ["EJK_CACHE_DIR"]) / "tune-v1"
    names = [p.name.rsplit("-", 1)[0] for p in store.glob("*.tune")] if store.is_dir() else []
    return {"flash_attention": names.count("flash_fwd"), "flash_attention_backward": names.count("flash_bwd")}


def _fresh_lengths():
    """Sequence lengths of a problem class no earlier run of this test recorded."""
    rng = np.random.default_rng(uuid.uuid4().int)
    return int(rng.integers(65, 400)), int(rng.integers(65, 400))


@pytest.mark.parametrize("forward_only", [False, True], ids=["validate_backward", "forward_autotune_only"])
def test_validate_backward_autotunes_the_backward_class_too(forward_only):
    # Lengths of a class with no record: a plan is made once per class, so one made earlier (under
    # another policy) would not be measured.
    q, k, v = _qkv(*_fresh_lengths(), seed=2)

    def loss(q, cfg=None):
        return jnp.sum(ejk.jax.flash_attention(q, k, v, cfg=cfg) ** 2)

    before = _records()
    ejk.ops.set_autotune_policy(ejk.ops.AutotunePolicy(validate_backward=True))
    if forward_only:
        with ejk.ops.forward_autotune_only():
            got = jax.block_until_ready(jax.grad(loss)(q))
    else:
        got = jax.block_until_ready(jax.grad(loss)(q))
    after = _records()
    assert after["flash_attention"] == before["flash_attention"] + 1
    assert after["flash_attention_backward"] == before["flash_attention_backward"] + (0 if forward_only else 1)
    ejk.ops.set_autotune_policy("heuristics")
    # The measured call's outputs are its winners': the gradient of a caller-chosen config.
    want = jax.grad(loss)(q, {"block_q": 64, "block_k": 64})
    assert float(jnp.linalg.norm(got - want) / jnp.linalg.norm(want)) <= 1e-5


@pytest.mark.parametrize("value, expected", [("autotune", "True"), ("heuristics", "False"), ("sometimes", "Error")])
def test_the_seeds_environment_variable_sets_the_policy_at_import(value, expected):
    import subprocess
    import sys
    code = ("import ejk.ops\n"
            "print(ejk.ops.get_autotune_policy().autotunes())")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, EJKERNEL_AUTOTUNE_POLICY=value))
    if expected == "Error":
        assert result.returncode != 0 and "EJKERNEL_AUTOTUNE_POLICY='sometimes'" in result.stderr
    else:
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == expected
