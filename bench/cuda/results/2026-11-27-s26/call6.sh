#!/bin/bash
# Session 26 call 6: the issue's grid on main's kernels after d26 (.carry/d26), the default key and the SDPA
# peers alternating row by row, three passes (paired.py); then this host's NVRTC cold compiles
# (nvrtc_phases.py, three each; CUDA_CACHE_DISABLE and --no-cache) of the keys over 1.0 s before.
cd "$(dirname "$0")/../../../.."
O=$OUT/c6; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
cat $O/gpu.txt; lscpu | grep -E "Model name|^CPU\(s\)" | tee $O/cpu.txt
t0=$(date +%s)
timeout 480 python3 bench/cuda/paired.py .carry/d26/check_flash $O/paired --passes 3 > $O/paired.txt 2>&1
echo "paired rc=$? ($(( $(date +%s) - t0 )) s)"; cat $O/paired.txt | tail -32
for k in "--d 128 --causal" "--d 128 --causal --segments" "--d 128 --causal --bias" "--d 112 --causal" "--d 160 --causal"; do
  timeout 60 python3 bench/cuda/nvrtc_phases.py $k --runs 3 2>&1 | tail -1 | tee -a $O/nvrtc.txt
done
echo "all done ($(( $(date +%s) - t0 )) s)"
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
