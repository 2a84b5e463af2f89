#!/bin/bash
# Session 28 call 12: main's kernels (unchanged this session: .carry/d26 =
# `bash bench/cuda/build_prebuilt.sh .carry/d26` on 24ffb9f) paired with the peers: the grid
# (three passes), head_dim 64 causal 1k alone (seven passes), then NVRTC cold compiles on this
# host (d128 causal, + segments, + bias; two processes x three compiles each).
cd "$(dirname "$0")/../../../.."
O=$OUT/c12; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt; cat $O/gpu.txt
t0=$(date +%s)
timeout 400 python3 bench/cuda/paired.py .carry/d26/check_flash $O/paired --passes 3 > $O/paired.txt 2>&1
echo "paired rc=$? ($(( $(date +%s) - t0 )) s)"; tail -34 $O/paired.txt
timeout 150 python3 bench/cuda/paired.py .carry/d26/check_flash $O/d64 --passes 7 --d 64 --s 1024 --causal 1 > $O/d64.txt 2>&1
tail -3 $O/d64.txt
{ lscpu | grep -E "Model name|^CPU\(s\)"; uptime
for flags in "--causal" "--causal --segments" "--causal --bias"; do
  for p in 1 2; do python3 bench/cuda/nvrtc_phases.py --d 128 $flags --runs 3; done
done; } > $O/nvrtc.txt 2>&1
cat $O/nvrtc.txt
cd $OUT && tar czf c12.tgz c12 && rm -rf c12
