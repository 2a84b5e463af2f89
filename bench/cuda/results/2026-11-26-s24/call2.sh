#!/bin/bash
# Session 24 call 2: (1) p24 = the staged bias kernels also prefetch the tile after next into L2
# (one line per lane): check, check_random, check-bench (grids of 3), memcheck 12-14, racecheck
# on 13 and 19 (bias staged), then the bias rows main (m24 = 6eaf13b) / p24, three passes.
# (2) test_cuda_backend alone built here and the bias copy test under memcheck (call 1's one
# error was the driver asked for an absent function); runtime_smoke bias-copy with the DtoD
# peer fixed (.carry/s24).
cd "$(dirname "$0")/../../../.."
O=$OUT/c2; mkdir -p $O
B=.carry/p24/check_flash
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
ok=1
timeout 120 $B check 20261121 > $O/check.txt 2>&1 || ok=0
EJK_PERSISTENT_GRID=3 timeout 150 $B check $RANDOM > $O/check_random.txt 2>&1 || ok=0
EJK_PERSISTENT_GRID=3 timeout 200 $B check-bench $RANDOM > $O/check_bench.txt 2>&1 || ok=0
for f in check check_random check_bench; do echo "$f: $(grep -c ^PASS $O/$f.txt) PASS; $(grep -v ^PASS $O/$f.txt | tail -3)"; done
echo "checks ok=$ok ($(( $(date +%s) - t0 )) s)"
EJK_PERSISTENT_GRID=5 timeout 100 compute-sanitizer --tool memcheck --print-limit 5 $B check 8 3 12 2>&1 | tail -2
for v in "1 13" "1 19"; do
  EJK_PERSISTENT_GRID=5 timeout 100 compute-sanitizer --tool racecheck --print-limit 5 $B check 9 $v 2>&1 | tail -2
done
echo "sanitizers ($(( $(date +%s) - t0 )) s)"
EJK_BENCH_GRID=0 EJK_BENCH_BIAS=1 timeout 240 bash bench/cuda/ab_builds.sh $O/ab 3 \
  main=.carry/m24/check_flash p24=$B "64:1024,4096,16384:bias" "128:1024,4096,16384:bias" > $O/ab.txt 2>&1
echo "ab rc=$? ($(( $(date +%s) - t0 )) s)"; tail -13 $O/ab.txt
T=/tmp/ejk-tests
cmake -S . -B $T -G Ninja -DCMAKE_BUILD_TYPE=Release -DEJK_ENABLE_ORC_JIT=OFF -DEJK_ENABLE_CUDA=ON \
  -DEJK_CUDA_ARCHS=90a -DCMAKE_PREFIX_PATH="$PWD/.carry/deps/usr" > $O/configure.log 2>&1
timeout 150 cmake --build $T --target test_cuda_backend -j 16 > $O/build.log 2>&1 || tail -20 $O/build.log
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $T/tests/cuda/test_cuda_backend \
  "the bias copy keeps every row bit for bit at any alignment and stride" > $O/memcheck_copy.txt 2>&1
echo "memcheck copy test rc=$? ($(( $(date +%s) - t0 )) s)"; tail -3 $O/memcheck_copy.txt
timeout 60 .carry/s24/runtime_smoke bias-copy 2>&1 | tee $O/bias_copy.txt
echo "all done ($(( $(date +%s) - t0 )) s)"
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
