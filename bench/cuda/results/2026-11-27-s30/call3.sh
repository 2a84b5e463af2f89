#!/bin/bash
# Session 30 call 3: the standalone check of main's kernels (.carry/s30, built here from cdeb2ab
# by build_prebuilt.sh): check, persistent grids of three blocks, L2 groups, no tile counter,
# check-bench, compute-sanitizer and runtime_smoke (build_and_check.sh check).
cd "$(dirname "$0")/../../../.."
O=$OUT/c3; mkdir -p $O
t0=$(date +%s)
EJK_PREBUILT=.carry/s30 OUT=$O timeout 560 bash bench/cuda/build_and_check.sh check > $O/check_run.txt 2>&1
echo "check rc=$? ($(( $(date +%s) - t0 )) s)"; tail -30 $O/check_run.txt
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
