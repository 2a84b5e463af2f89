#!/bin/bash
# Session 12 call 9: the issue's grid, paired with the peers row by row (paired.py, two passes),
# on main's kernels (8f80eae = .carry/v46b).
cd "$(dirname "$0")/../../../.."
mkdir -p $OUT/c9
python3 bench/cuda/paired.py .carry/v46b/check_flash $OUT/c9/paired --passes 2 2>&1 | tee $OUT/c9/paired.txt
cd $OUT && tar czf c9.tgz c9 && rm -rf c9
