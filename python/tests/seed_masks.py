"""The seed's side of test_mask_info.py: every case of mask_cases.py built with
``ejkernel.types``, its results saved to the .npz named by argv[1]. Run by the interpreter where
ejkernel is installed."""
import sys

import numpy as np

import mask_cases


def main():
    import ejkernel.types as types
    saved = {}
    for name, build in mask_cases.cases(types).items():
        for key, value in mask_cases.results(build()).items():
            saved[f"{name}/{key}"] = value
    np.savez(sys.argv[1], **saved)


if __name__ == "__main__":
    main()
