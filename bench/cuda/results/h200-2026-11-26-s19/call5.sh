#!/bin/bash
# Session 19 call 5: scripts/device-check.sh on the final tree (v68): the CMake build with CUDA,
# the CUDA ctests, `ejk run --check`, NVRTC cold compiles + cache hit, compute-sanitizer.
cd "$(dirname "$0")/../../../.."
O=$OUT/c5; mkdir -p $O
OUT=$O timeout 560 bash scripts/device-check.sh > $O/device-check.txt 2>&1
echo "rc=$?"
cat $O/device-check.txt | cut -c1-260
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
