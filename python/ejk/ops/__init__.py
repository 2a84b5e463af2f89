"""One module per op family: the seed's signatures (WRAPPERS), and where an op has them its
gradient (GRADIENTS) and JAX batching rule (VMAP). ejk.jax and ejk.torch bind every module found
here (ejk/_kit.py); a new op needs a file here and nothing else in the package."""
