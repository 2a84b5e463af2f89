"""The bounds both ring tests (JAX and torch) hold a ring's relative L2 errors to: an output and
its gradients against the float64 reference and against flash_attention on the gathered sequence."""
TOLERANCE = {"float32": 1e-5, "bfloat16": 1e-2}
GRAD_TOLERANCE = {"float32": 1e-5, "bfloat16": 2e-2}


def assert_within(label, result):
    """result: {"dtype": name, "reference": {what: err}, "flash": {what: err}}."""
    dtype = result["dtype"]
    for against in ("reference", "flash"):
        for what, err in result[against].items():
            tol = TOLERANCE[dtype] if what == "out" else GRAD_TOLERANCE[dtype]
            if against == "flash" and dtype != "float32":
                tol *= 2  # two bfloat16 computations, each within its tolerance of the exact one
            assert err <= tol, f"{label}: {what} against {against}: relative L2 {err:.3g} > {tol}"
