#!/bin/bash
# Session 8 call 3: the GQA 32:8 + window 1024 + softcap 30 rows again (both tiles: the
# heuristic's 192 x 128 and 128 x 128 with Q in registers), two passes, against FlexAttention
# compiled per shape with static shapes; then scripts/device-check.sh on this tree (project
# build with CUDA on and the ORC JIT off, CUDA ctests, ejk run --check on the GPU, NVRTC cold
# compile and cache hit, compute-sanitizer on the runtime path).
cd "$(dirname "$0")/../../../.."
B=.carry/v25b/check_flash; O=$OUT/c3; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader
export EJK_BENCH_GRID=0 EJK_BENCH_WINDOW=1 EJK_BENCH_VARIANTS=causal.win.cap
timeout 60 $B bench > $O/window1.jsonl
PYTHONUNBUFFERED=1 timeout 200 python3 bench/cuda/bench_vs_peers.py $O/window1.jsonl $O/flex.jsonl 2>&1 | grep -v Warning | tee $O/window.txt
timeout 60 $B bench > $O/window2.jsonl
cat $O/window2.jsonl | cut -c1-160
unset EJK_BENCH_GRID EJK_BENCH_WINDOW EJK_BENCH_VARIANTS
OUT=$O/dc timeout 420 bash scripts/device-check.sh 2>&1 | tail -50
