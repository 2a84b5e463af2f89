"""ejkernel: attention kernels for CPUs and NVIDIA GPUs, from Python.

    import ejk.jax, ejk.torch     # every op of libejk with a file in ejk/ops/ (README lists them)

``import ejk`` loads libejk privately (RTLD_LOCAL) from the package (or from $EJK_LIBRARY_DIR);
``ejk.jax`` registers the ops with XLA as FFI handlers. A variant outside the built-in set is
compiled on first use (CPU: the JIT plugin, with the system's LLVM 19; CUDA: NVRTC) and kept in
the disk cache ($EJK_CACHE_DIR, else ~/.cache/ejkernel).
"""
from ._lib import BackendUnavailable, CompileError, library_dir, libejk, version

__all__ = ["BackendUnavailable", "CompileError", "library_dir", "version"]
__version__ = "0.1.0"

libejk()
