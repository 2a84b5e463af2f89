"""Runs against the package in python/ and the libraries $EJK_LIBRARY_DIR names (a build's
runtime/ directory), or an installed package when EJK_LIBRARY_DIR is unset. Variants compiled
here go to $EJK_CACHE_DIR, else to a fresh directory per pytest run."""
import os
import sys
import tempfile

import numpy as np
import pytest

if "EJK_CACHE_DIR" not in os.environ:
    os.environ["EJK_CACHE_DIR"] = tempfile.mkdtemp(prefix="ejk-pytest-cache-")
sys.path.insert(0, os.path.dirname(__file__))  # reference.py


def assert_close(got, want, dtype_name="float32"):
    """Max abs error relative to the reference's scale: 1e-5 for float32, 2e-2 for 16-bit."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    finite = np.isfinite(want)
    assert np.array_equal(np.isfinite(got), finite), "infinities differ"
    assert np.array_equal(got[~finite], want[~finite])
    tol = 1e-5 if dtype_name == "float32" else 2e-2
    scale = max(1.0, float(np.abs(want[finite]).max(initial=0.0)))
    err = float(np.abs(got[finite] - want[finite]).max(initial=0.0))
    assert err <= tol * scale, f"max error {err:.3g} > {tol * scale:.3g}"


@pytest.fixture
def rng():
    return np.random.default_rng(0)
