"""ring_attention's framework halves (communication and custom gradient): a package, so that
the op discovery of ejk/_kit.py, which imports every module of ejk/ops/, does not import JAX in
a PyTorch process or PyTorch in a JAX one; ring_attention.py imports the one it needs."""
