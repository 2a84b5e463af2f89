#!/bin/bash
# Session 13 call 4: can the drawn-items device test fail? The runtime mutated to share one tile
# counter between all streams of a device (cuda_backend.cpp tile_counter keyed by the device
# alone); only test_cuda_backend built; the two-stream test run three times. Expected: FAIL.
cd "$(dirname "$0")/../../../.."
mkdir -p $OUT/c4
sed -i 's/counters\[{ordinal, stream}\]/counters[{ordinal, nullptr}]/' runtime/src/cuda/cuda_backend.cpp
grep -n "counters\[{" runtime/src/cuda/cuda_backend.cpp
B=/tmp/ejk-build-mut
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DEJK_ENABLE_ORC_JIT=OFF -DEJK_ENABLE_CUDA=ON \
  -DEJK_CUDA_ARCHS=90a -DCMAKE_PREFIX_PATH="$PWD/.carry/deps/usr" > $OUT/c4/configure.log 2>&1 || tail -20 $OUT/c4/configure.log
cmake --build $B -j 16 --target test_cuda_backend > $OUT/c4/build.log 2>&1 || grep -E "error" $OUT/c4/build.log | head
for i in 1 2 3; do
  $B/tests/cuda/test_cuda_backend "drawn work items: back to back on one stream and at once on two" 2>&1 | tail -15
done | tee $OUT/c4/log.txt
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
