"""Shared by the ejk.torch tests (test_torch*.py): importing torch and ejk.torch, or skipping the
module with a reason `pytest -rs` shows (CI installs no torch), whether CPU variants can be
compiled here, and comparing with the float64 reference by relative L2 error."""
import ctypes
import functools
import os

import numpy as np
import pytest

REQUIRED = os.environ.get("EJK_REQUIRE_TORCH") == "1"  # scripts/test-torch.sh: a skip would hide a failure


def import_torch():
    """torch, with ejk.torch loaded; skips the calling module when either is missing."""
    if REQUIRED:
        import torch
        import ejk.torch  # noqa: F401
        return torch
    torch = pytest.importorskip("torch", reason="torch is not installed: the ejk.torch tests need torch >= 2.10 "
                                                "(scripts/test-torch.sh builds and runs them)")
    try:
        import ejk.torch  # noqa: F401
    except ImportError as e:
        pytest.skip(f"ejk.torch is not importable: {e}", allow_module_level=True)
    return torch


@functools.cache
def no_cpu_jit():
    """Why no new CPU variant can be compiled with these libraries (None: it can). A GPU machine
    without LLVM builds with -DEJK_ENABLE_ORC_JIT=OFF."""
    from ejk import library_dir
    plugin = library_dir() / "libejk_cpu_jit.so"
    if not plugin.exists():
        return f"no CPU JIT plugin in {plugin.parent} (built with -DEJK_ENABLE_ORC_JIT=OFF)"
    try:
        ctypes.CDLL(str(plugin), mode=os.RTLD_LOCAL)  # what libejk would load for its first compile
    except OSError as e:
        return f"the CPU JIT plugin does not load (no LLVM 19?): {e}"
    return None


def numpy64(x):
    """A tensor (any dtype, any device) or array as float64 NumPy: the values the op saw."""
    if hasattr(x, "detach"):
        x = x.detach().cpu()
        return x.double().numpy() if x.is_floating_point() else x.numpy()
    return np.asarray(x)


TOLERANCE = {"float32": 1e-5, "bfloat16": 1e-2, "float16": 1e-2}


def assert_rel_l2(got, want, dtype_name="float32"):
    """||got - want|| / ||want|| within the dtype's tolerance; infinities must match exactly (an
    lse of a row that sees no key is -inf) and nothing may be NaN."""
    got, want = numpy64(got), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    assert not np.isnan(got).any(), "NaN in the result (an element not written?)"
    finite = np.isfinite(want)
    assert np.array_equal(np.isfinite(got), finite), "infinities differ"
    assert np.array_equal(got[~finite], want[~finite])
    diff = np.linalg.norm(got[finite] - want[finite])
    scale = np.linalg.norm(want[finite])
    tol = TOLERANCE[dtype_name]
    assert diff <= tol * max(scale, 1e-30) or diff <= tol * 1e-6, f"relative L2 error {diff / max(scale, 1e-30):.3g} > {tol}"


def poison(torch, device, *shapes):
    """Frees NaN-filled blocks of the given shapes (float32 elements) just before an op allocates
    its outputs: CUDA's caching allocator (and often the CPU's) hands them out again, so an
    element the op does not write shows as NaN."""
    blocks = [torch.full(shape, float("nan"), device=device) for shape in shapes]
    del blocks
