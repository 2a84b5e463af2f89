#!/bin/bash
# Session 27 call 4: the goal rows once more on this session's H100, main's kernels (.carry/d26:
# built from 24ffb9f; the flash kernels' code is unchanged since, session 26's review and this
# session's bias-copy change touch no flash kernel's code): the GQA 32:8 + window 1024 + softcap
# 30 rows against FlexAttention (not re-timed since session 24), then the issue's grid, the
# default key and the SDPA peers alternating row by row, three passes (paired.py).
cd "$(dirname "$0")/../../../.."
O=$OUT/c4; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
cat $O/gpu.txt
t0=$(date +%s)
EJK_BENCH_GRID=0 EJK_BENCH_WINDOW=1 timeout 120 .carry/d26/check_flash bench > $O/window_ours.jsonl 2> $O/window_err.txt
PYTHONUNBUFFERED=1 timeout 180 python3 bench/cuda/bench_vs_peers.py $O/window_ours.jsonl $O/window_peers.jsonl > $O/window.txt 2>&1
echo "window rc=$? ($(( $(date +%s) - t0 )) s)"; cat $O/window.txt | head -20
timeout 400 python3 bench/cuda/paired.py .carry/d26/check_flash $O/paired --passes 3 > $O/paired.txt 2>&1
echo "paired rc=$? ($(( $(date +%s) - t0 )) s)"; tail -34 $O/paired.txt
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
