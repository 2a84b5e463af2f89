"""ejk.torch's ops take the seed's arguments (names, order, kinds, JSON defaults), as
test_signatures.py checks for ejk.jax; torch spells the seed's JAX defaults (precision,
logits_dtype) its own way."""
import inspect
import json
import pathlib

from signature_extensions import seed_part
from torch_support import import_torch

import_torch()  # skips the module where torch or ejk.torch is missing
import ejk.torch as ejk_torch  # noqa: E402
SEED = json.loads((pathlib.Path(__file__).resolve().parent / "seed_signatures.json").read_text())


def test_every_common_op_has_the_seeds_signature_torch():
    names = sorted(set(ejk_torch.__all__) & set(SEED["ops"]))
    assert {"flash_attention", "mean_pooling", "recurrent_attention"} <= set(names)
    for name in names:
        params = seed_part(name, list(inspect.signature(getattr(ejk_torch, name)).parameters.values()))
        seed = SEED["ops"][name]
        assert [(p.name, p.kind.name) for p in params] == [(p["name"], p["kind"]) for p in seed], name
        for p, want in zip(params, seed):
            if want["default"] is None:
                assert p.default is inspect.Parameter.empty, (name, p.name)
            elif "literal" in want["default"]:
                assert p.default == want["default"]["literal"], (name, p.name)
