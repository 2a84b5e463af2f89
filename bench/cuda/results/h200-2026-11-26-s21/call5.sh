#!/bin/bash
# Session 21 call 5: call 4's bench_issue.sh ran out of its 575 s before the window rows through
# `ejk` and the paired grid; here the paired grid alone (one pass, the device budget's rest).
cd "$(dirname "$0")/../../../.."
O=$OUT/c5; mkdir -p $O
timeout 235 python3 bench/cuda/paired.py .carry/v75/check_flash $O/paired --passes 1 > $O/table.txt 2>&1
echo "rc=$?"; tail -32 $O/table.txt
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
