"""The seed's side of test_mask_info.py: every case of mask_cases.py built with
``ejkernel.types`` (or the module argv[2] names: test_torch_mask_info.py asks for ``ejk.types``,
JAX's, from an interpreter with JAX), its results saved to the .npz named by argv[1]. Run by the
interpreter where that module is installed."""
import importlib
import sys

import numpy as np

import mask_cases


def main():
    types = importlib.import_module(sys.argv[2] if len(sys.argv) > 2 else "ejkernel.types")
    saved = {}
    for name, build in mask_cases.cases(types).items():
        for key, value in mask_cases.results(build()).items():
            saved[f"{name}/{key}"] = value
    np.savez(sys.argv[1], **saved)


if __name__ == "__main__":
    main()
