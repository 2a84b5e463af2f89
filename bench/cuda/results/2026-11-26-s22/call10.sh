#!/bin/bash
# Session 22 call 10: the product path on the bias-pairs tree: scripts/device-check.sh
# (CMake build, CUDA ctests incl. the random feature matrix with segments, `ejk run --check`,
# sanitizers, NVRTC timings). (the staged copy: --sk 777 and --sk 333 with --bias, the latter under memcheck).
cd "$(dirname "$0")/../../../.."
O=$OUT/c10; mkdir -p $O
t0=$(date +%s)
OUT=$O/dc timeout 560 bash scripts/device-check.sh > $O/device_check.txt 2>&1
echo "device-check rc=$? ($(( $(date +%s) - t0 )) s)"; tail -45 $O/device_check.txt | cut -c1-400
cd $OUT && tar czf c10.tgz c10 && rm -rf c10
