#!/bin/bash
# Session 30 call 2: scripts/device-check.sh on main (cdeb2ab): the CUDA ctests (AOT set built
# by nvcc, every key through NVRTC), `ejk run --check`, NVRTC cold compile and cache hit,
# memcheck and racecheck; then this host's NVRTC for the segment and bias keys.
cd "$(dirname "$0")/../../../.."
O=$OUT/c2; mkdir -p $O
git log --oneline -1 > $O/commit.txt 2>/dev/null; cat $O/commit.txt
OUT=$O timeout 500 bash scripts/device-check.sh > $O/device_check.txt 2>&1
echo "device-check rc=$?"; tail -60 $O/device_check.txt
{ grep MHz /proc/cpuinfo | sort | uniq -c | head -3
  for flags in "--causal" "--causal --segments" "--causal --bias"; do
    timeout 30 python3 bench/cuda/nvrtc_phases.py --d 128 $flags --runs 3 --each | tail -4
  done; } > $O/nvrtc.txt 2>&1
cat $O/nvrtc.txt
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
