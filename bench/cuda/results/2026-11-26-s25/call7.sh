#!/bin/bash
# Session 25 call 7: the d64 causal 1k / 2k rows paired with PyTorch SDPA (cuDNN, FA2), five
# passes, on this session's kernels (b25e; the plain keys' code as session 24's).
cd "$(dirname "$0")/../../../.."
O=$OUT/c7; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
cat $O/gpu.txt
t0=$(date +%s)
timeout 200 python3 bench/cuda/paired.py .carry/b25e/check_flash $O/paired --passes 5 --d 64 --s 1024,2048 \
  --causal 1 > $O/paired.txt 2>&1
echo "paired rc=$? ($(( $(date +%s) - t0 )) s)"; tail -4 $O/paired.txt
cd $OUT && tar czf c7.tgz c7 && rm -rf c7
