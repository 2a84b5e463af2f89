#!/bin/bash
# Session 29 call 9: w29c = the final kernels (groups only in blocks of one or two consumer
# warpgroups; the three-consumer kernels' .text is byte-identical to main's): the check, then
# paired with the peers on the head_dim 64 1k rows and head_dim 128 4k (three passes).
cd "$(dirname "$0")/../../../.."
O=$OUT/c9; mkdir -p $O
(time timeout 150 .carry/w29c/check_flash check) > $O/check.txt 2>&1; grep "^check:" $O/check.txt; tail -3 $O/check.txt
timeout 200 python3 bench/cuda/paired.py .carry/w29c/check_flash $O/p64 --passes 3 --d 64 --s 1024 > $O/p64.txt 2>&1
timeout 120 python3 bench/cuda/paired.py .carry/w29c/check_flash $O/p128 --passes 3 --d 128 --s 4096 > $O/p128.txt 2>&1
tail -3 $O/p64.txt; tail -3 $O/p128.txt
cd $OUT && tar czf c9.tgz c9 && rm -rf c9
