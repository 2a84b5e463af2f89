#!/bin/bash
# Session 22 call 8: the product path on the final tree (main's v78 kernels): scripts/device-check.sh
# (CMake build, CUDA ctests incl. the random feature matrix with segments, `ejk run --check`,
# sanitizers, NVRTC timings). Call 3 ran it on v77's.
cd "$(dirname "$0")/../../../.."
O=$OUT/c8; mkdir -p $O
t0=$(date +%s)
OUT=$O/dc timeout 560 bash scripts/device-check.sh > $O/device_check.txt 2>&1
echo "device-check rc=$? ($(( $(date +%s) - t0 )) s)"; tail -45 $O/device_check.txt | cut -c1-400
cd $OUT && tar czf c8.tgz c8 && rm -rf c8
