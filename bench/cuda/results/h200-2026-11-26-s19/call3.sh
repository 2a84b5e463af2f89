#!/bin/bash
# Session 19 call 3: the issue's grid paired with PyTorch SDPA's peers on v68's kernels
# (.carry/v68 = this tree's kernels at 13aa808): head_dim 64 in six passes (the rows short of
# 1.6x FA2), head_dim 128 and 256 in two.
cd "$(dirname "$0")/../../../.."
O=$OUT/c3; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
python3 bench/cuda/paired.py .carry/v68/check_flash $O/d64 --passes 6 --d 64 > $O/d64.txt 2>&1
python3 bench/cuda/paired.py .carry/v68/check_flash $O/d128_256 --passes 2 --d 128,256 > $O/d128_256.txt 2>&1
cat $O/d64.txt $O/d128_256.txt | grep -v "^pass"
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
