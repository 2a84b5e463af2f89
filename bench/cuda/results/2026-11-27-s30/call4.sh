#!/bin/bash
# Session 30 call 4: the issue's benchmark on main's kernels (.carry/s30, checked in call 3):
# bench_issue.sh without its check step: the unpaired grid and the window rows against the
# peers, JAX cuDNN, the window rows through `ejk`, the paired grid (three passes).
cd "$(dirname "$0")/../../../.."
O=$OUT/c4; mkdir -p $O
t0=$(date +%s)
EJK_ISSUE_CHECK=0 EJK_PREBUILT=.carry/s30 EJK_PAIRED_PASSES=3 OUT=$O timeout 570 bash bench/cuda/bench_issue.sh > $O/bench_issue.txt 2>&1
echo "bench_issue rc=$? ($(( $(date +%s) - t0 )) s)"; tail -60 $O/bench_issue.txt
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
