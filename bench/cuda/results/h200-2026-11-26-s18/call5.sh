#!/bin/bash
# Session 18 call 5: the first NVRTC compile of a process against the next ones, with and
# without a trivial program compiled first (first_compile.py), fresh processes alternating.
cd "$(dirname "$0")/../../../.."
O=$OUT/c5; mkdir -p $O
F=bench/cuda/results/h200-2026-11-26-s18/first_compile.py
for rep in 1 2; do
  for k in "--d 128 --causal" "--d 128 --causal --segments" "--d 64 --causal"; do
    echo "== $k" | tee -a $O/first.txt
    python3 $F $k 2>&1 | tee -a $O/first.txt
    python3 $F --trivial-first $k 2>&1 | tee -a $O/first.txt
  done
done > /dev/null
cat $O/first.txt
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
