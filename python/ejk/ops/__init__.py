"""One module per op family: the seed's signatures (WRAPPERS), and where an op has them its
gradient (GRADIENTS) and JAX batching rule (VMAP). ejk.jax and ejk.torch bind every module found
here (ejk/_kit.py); a new op needs a file here and nothing else in the package.

As a namespace, ``ejk.ops`` is also ``ejkernel.ops``' config-selection API (``AutotunePolicy``,
``overlay_cache``, ``policy_override``, ``forward_autotune_only``, ...), from ``_policy``: a
private module, which op_modules() does not take for an op's."""
from ._policy import *  # noqa: F401,F403
from ._policy import __all__  # noqa: F401
