#!/bin/bash
# Session 23 call 5: v87 (the bias copy loop not unrolled: NVRTC of the bias keys back to main's,
# fewer spills) against v86, bias rows two passes, after a check of v87; then the runtime with a
# scratch kept per stream for biases it must copy (call 4: ~2 ms per launch for a 0.5 GB bias
# with a fresh cuMemAllocAsync each launch): `ejk run` at Sk 4096 (read in place), 4095 and 4092.
cd "$(dirname "$0")/../../../.."
O=$OUT/c5; mkdir -p $O
t0=$(date +%s)
timeout 120 .carry/v87/check_flash check 20261121 > $O/check.txt 2>&1; echo "check rc=$? $(tail -1 $O/check.txt)"
EJK_BENCH_GRID=0 EJK_BENCH_BIAS=1 timeout 150 bash bench/cuda/ab_builds.sh $O/ab 2 \
  v86=.carry/v86/check_flash v87=.carry/v87/check_flash \
  "64:1024,4096,16384:bias" "128:1024,4096,16384:bias" > $O/ab.txt 2>&1
echo "ab rc=$? ($(( $(date +%s) - t0 )) s)"; tail -13 $O/ab.txt
B=/tmp/ejk-build
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DEJK_ENABLE_ORC_JIT=OFF -DEJK_ENABLE_CUDA=ON \
  -DEJK_CUDA_ARCHS=90a -DCMAKE_PREFIX_PATH="$PWD/.carry/deps/usr" > $O/configure.log 2>&1
cmake --build $B -j 16 --target ejk > $O/build.log 2>&1 || { tail -20 $O/build.log; }
echo "built ($(( $(date +%s) - t0 )) s)"
export EJK_CACHE_DIR=/tmp/ejk-cache
for sk in 4096 4095 4092; do
  for d in 64 128; do
    $B/cli/ejk run flash_attention --backend cuda --dtype bf16 --b 1 --sq 4096 --sk $sk --hq 16 --hkv 16 \
      --d $d --bias --iters 20 --json 2>&1 | tail -1 | python3 -c "import json,sys; j=json.load(sys.stdin); print('sk', $sk, j['key'], 'ms', j['ms'], 'TF', round(j['gflops']/1e3,1), 'compile_ms', round(j['compile_ms']))"
  done
done
$B/cli/ejk run flash_attention --backend cuda --dtype bf16 --b 1 --sq 1000 --sk 777 --hq 4 --hkv 4 --d 128 --bias --causal --iters 3 --check --json | tail -1 | cut -c1-200
echo "done ($(( $(date +%s) - t0 )) s)"
rm -f $O/build.log
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
