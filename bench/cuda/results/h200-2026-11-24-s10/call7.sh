#!/bin/bash
# Session 10 call 7: the issue's grid with main's default keys (.carry/v37, 8d388c6's kernels)
# and the SDPA peers alternating row by row, three passes (bench/cuda/paired.py, the new last
# step of bench_issue.sh, run here on its own).
cd "$(dirname "$0")/../../../.."
mkdir -p $OUT/paired
python3 bench/cuda/paired.py .carry/v37/check_flash $OUT/paired --passes 3 | tee $OUT/paired/table.txt
cd $OUT && tar czf paired.tgz paired && rm -rf paired
