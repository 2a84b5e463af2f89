#!/bin/bash
# Session 30 call 1: main's kernels (.carry/w29c = cdeb2ab's, .carry/d26 = before session 29).
# (1) The rows session 29 left in doubt, nine passes, with a second copy of w29c as the noise
# floor: d128 non-causal 4k / 16k, d64 causal 1k. (2) The issue's grid paired with the peers,
# three passes. (3) This host's NVRTC: CPU time against wall per compile, steal and load.
cd "$(dirname "$0")/../../../.."
O=$OUT/c1; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt; cat $O/gpu.txt
cp -r .carry/w29c .carry/w29cx
t0=$(date +%s)
timeout 200 bash bench/cuda/ab_builds.sh $O/ab 9 d26=.carry/d26/check_flash w29c=.carry/w29c/check_flash w29cx=.carry/w29cx/check_flash \
  "128:4096,16384:bf16.d128.bq128.bk128.wgmma\$" \
  "64:1024:bf16.d64.bq128.bk128.causal.wgmma\$" > $O/ab_run.txt 2>&1
echo "ab rc=$? ($(( $(date +%s) - t0 )) s)"; sed -n '/every variant/,$p' $O/ab/ab.txt
t0=$(date +%s)
timeout 250 python3 bench/cuda/paired.py .carry/w29c/check_flash $O/paired --passes 3 > $O/paired.txt 2>&1
echo "paired rc=$? ($(( $(date +%s) - t0 )) s)"; tail -34 $O/paired.txt
{ lscpu | grep -E "Model name|^CPU\(s\)|MHz|Thread|Hypervisor"
  grep MHz /proc/cpuinfo | sort | uniq -c | head -5
  cat /proc/loadavg; head -1 /proc/stat
  for p in 1 2 3; do
    timeout 30 python3 bench/cuda/nvrtc_phases.py --d 128 --causal --runs 3 --each | tail -5
  done
  timeout 30 python3 bench/cuda/nvrtc_phases.py --d 64 --causal --runs 3 --each | tail -5
  head -1 /proc/stat; cat /proc/loadavg; } > $O/nvrtc.txt 2>&1
cat $O/nvrtc.txt
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
