#!/bin/bash
# Session 18 call 4: scripts/device-check.sh on main (CMake build with CUDA on and the ORC JIT
# off, CUDA ctests, ejk run --check, NVRTC cold compiles and cache hits on this host,
# compute-sanitizer), then NVRTC's phases for three keys on this host (cold, no driver cache).
cd "$(dirname "$0")/../../../.."
O=$OUT/c4; mkdir -p $O
OUT=$O bash scripts/device-check.sh > $O/device-check.txt 2>&1
tail -60 $O/device-check.txt
for a in "--d 128 --causal" "--d 64 --causal" "--d 128 --causal --segments"; do
  python3 bench/cuda/nvrtc_phases.py $a --runs 3 2>&1 | tail -1 | tee -a $O/nvrtc.txt
done
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
