#!/bin/bash
# Session 29 call 3: the whole SASS of d26's and w29's check_flash (gzipped), to read locally
# where the whole-GEMM statements moved code (sass_diff.py; the kernels are picked there).
cd "$(dirname "$0")/../../../.."
O=$OUT/c3; mkdir -p $O
for b in d26 w29; do cuobjdump -sass .carry/$b/check_flash | gzip -6 > $O/$b.sass.gz; done
ls -la $O
