#!/bin/bash
# Session 17 call 2 (prepared in session 16 as call6.sh): the issue's grid
# paired with the SDPA peers (six passes) on main at the session's end (v58 + v60;
# .carry/s16 = bench/cuda/build_prebuilt.sh on 3457f5f): v60's head_dim 128 gain (call 3's A/B)
# in the paired table.
cd "$(dirname "$0")/../../../.."
O=$OUT/c2; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
PYTHONUNBUFFERED=1 timeout 330 python3 bench/cuda/paired.py .carry/s16/check_flash $O/paired --passes 6 > $O/paired.txt 2>&1
cut -c1-140 $O/paired.txt
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
