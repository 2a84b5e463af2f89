#!/bin/bash
# Session 13 call 1: drawn work items (v48: the persistent causal blocks with item records take
# each item from a tile counter) against main (v47: the static snake). The keys it changes that
# the heuristic picks: head_dim 64 causal 128 x 128 (1k, 2k), head_dim 128 causal 128 x 128
# (1k-4k); the 4k / 8k rows as controls. Three alternating passes; then build_and_check.sh's
# check step on v48 (full grid, grids of three, L2 head groups, no counter, check-bench on
# grids of three, sanitizers, the runtime's NVRTC path).
cd "$(dirname "$0")/../../../.."
O=$OUT/c1; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
A=.carry/v47/check_flash; B=.carry/v48/check_flash
Q64='bf16.d64.bq128.bk128.causal.wgmma$'
Q128='bf16.d128.bq128.bk128.causal.wgmma$'
bash bench/cuda/ab_builds.sh $O/ab 3 v47=$A v48=$B 64:1024,2048,4096:$Q64 128:1024,2048,4096,8192:$Q128
mkdir -p $O/check
OUT=$O/check EJK_PREBUILT=.carry/v48 bash bench/cuda/build_and_check.sh check 2>&1 | tail -40 | tee $O/check/log.txt
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
