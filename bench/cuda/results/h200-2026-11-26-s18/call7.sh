#!/bin/bash
# Session 18 call 7: is the first compile's extra ~0.2 s (call 5) NVRTC's driver cache starting
# CUDA? Fresh processes, alternating: the default against NVRTC's --no-cache, a trivial program
# first (its time is the start-up), then the d128 causal key; once with the cache trace on.
cd "$(dirname "$0")/../../../.."
O=$OUT/c7; mkdir -p $O
F=bench/cuda/results/h200-2026-11-26-s18/first_compile.py
for rep in 1 2 3; do
  python3 $F --trivial-first --d 128 --causal 2>&1
  python3 $F --trivial-first --d 128 --causal -- --no-cache 2>&1
done > $O/first.txt
for rep in 1 2; do
  python3 $F --d 128 --causal --segments 2>&1
  python3 $F --d 128 --causal --segments -- --no-cache 2>&1
done >> $O/first.txt
python3 $F --trivial-first --d 64 -- --enable-cache-trace > $O/trace.txt 2>&1
cat $O/first.txt; head -c 1500 $O/trace.txt
cd $OUT && tar czf c7.tgz c7 && rm -rf c7
