#!/bin/bash
# Session 18 call 2: the issue's grid paired with the SDPA peers (six passes) on main's
# kernels (.carry/s16 = bench/cuda/build_prebuilt.sh on main; kernels unchanged since cc4db7b),
# this time on the H200 the session was given (sessions 14-17 ran on H100s).
cd "$(dirname "$0")/../../../.."
O=$OUT/c2; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee $O/gpu.txt
PYTHONUNBUFFERED=1 timeout 400 python3 bench/cuda/paired.py .carry/s16/check_flash $O/paired --passes 6 > $O/paired.txt 2>&1
cut -c1-140 $O/paired.txt
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
