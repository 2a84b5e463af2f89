#!/bin/bash
# Session 14 call 9: the causal rows at head_dim 64 and 128 up to 4k paired with the SDPA peers
# (three passes) on v54 with the heuristic's new choice (head_dim 64 causal 4k: the drawing
# 128 x 128 instead of 192 x 128; paired.py reads the spec).
cd "$(dirname "$0")/../../../.."
O=$OUT/c9; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
PYTHONUNBUFFERED=1 timeout 400 python3 bench/cuda/paired.py .carry/v54/check_flash $O/paired --passes 3 \
  --d 64,128 --s 1024,2048,4096 --causal 1 > $O/paired.txt 2>&1
cut -c1-130 $O/paired.txt
cd $OUT && tar czf c9.tgz c9 && rm -rf c9
