"""Every op both ejk and the seed (ejkernel 0.0.80.3) have takes the seed's arguments: the same
names in the same order, of the same kinds, with the same defaults, in ejk.jax and in ejk.torch.
(ejk.torch: test_torch_signatures.py.) The seed's side is seed_signatures.json (seed_signatures.py writes it); where the seed is
installed (EJK_SEED_PYTHON, or /work/venvs/seed), the snapshot is checked against it too."""
import inspect
import json
import os
import pathlib
import subprocess
import sys

import pytest

import ejk.jax
from signature_extensions import seed_part

HERE = pathlib.Path(__file__).resolve().parent
SEED = json.loads((HERE / "seed_signatures.json").read_text())
SEED_PYTHON = os.environ.get("EJK_SEED_PYTHON", "/work/venvs/seed/bin/python")


def ours(name, fn):
    params = seed_part(name, list(inspect.signature(fn).parameters.values()))
    return [(p.name, p.kind.name, p.default) for p in params]


def check(name, fn, seed, literal_only):
    """Names, kinds and defaults (a JSON default by value; another by its repr, unless
    literal_only: torch's spelling of a JAX default differs); our extensions left out."""
    mine = ours(name, fn)
    assert [(n, k) for n, k, _ in mine] == [(p["name"], p["kind"]) for p in seed]
    for (name, _, default), p in zip(mine, seed):
        want = p["default"]
        if want is None:
            assert default is inspect.Parameter.empty, name
        elif "literal" in want:
            got = list(default) if isinstance(default, tuple) else default
            assert got == want["literal"] and type(got) is type(want["literal"]), name
        elif not literal_only:
            assert repr(default) == want["repr"], name


def common(module):
    """The ops both have: those another op file adds are checked as soon as it is merged."""
    return sorted(set(module.__all__) & set(SEED["ops"]))


def test_every_common_op_has_the_seeds_signature_jax():
    names = common(ejk.jax)
    assert {"flash_attention", "mean_pooling", "recurrent_attention"} <= set(names)
    for name in names:
        check(name, getattr(ejk.jax, name), SEED["ops"][name], literal_only=False)


def test_the_snapshot_is_the_installed_seeds():
    if not os.path.exists(SEED_PYTHON):
        pytest.skip(f"no seed interpreter at {SEED_PYTHON} (EJK_SEED_PYTHON): the committed snapshot is used")
    r = subprocess.run([SEED_PYTHON, str(HERE / "seed_signatures.py")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout) == SEED, "seed_signatures.json is stale: run seed_signatures.py"
