#!/bin/bash
# Session 23 call 6 (call 5's runtime part again: its build named the wrong target): the runtime
# with a scratch kept per stream for biases it must copy (call 4: ~2 ms per launch for a 0.5 GB
# bias, a fresh cuMemAllocAsync each launch): `ejk run` at Sk 4096 (read in place), 4095, 4092.
cd "$(dirname "$0")/../../../.."
O=$OUT/c6; mkdir -p $O
t0=$(date +%s)
B=/tmp/ejk-build
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DEJK_ENABLE_ORC_JIT=OFF -DEJK_ENABLE_CUDA=ON \
  -DEJK_CUDA_ARCHS=90a -DCMAKE_PREFIX_PATH="$PWD/.carry/deps/usr" > $O/configure.log 2>&1
cmake --build $B -j 16 --target ejk_cli > $O/build.log 2>&1 || { tail -20 $O/build.log; }
echo "built ($(( $(date +%s) - t0 )) s)"
export EJK_CACHE_DIR=/tmp/ejk-cache
for sk in 4096 4095 4092; do
  for d in 64 128; do
    $B/cli/ejk run flash_attention --backend cuda --dtype bf16 --b 1 --sq 4096 --sk $sk --hq 16 --hkv 16 \
      --d $d --bias --iters 20 --json 2>&1 | tail -1 | tee -a $O/runs.jsonl | python3 -c "import json,sys; j=json.load(sys.stdin); print('sk', $sk, j['key'], 'ms', j['ms'], 'TF', round(j['gflops']/1e3,1), 'compile_ms', round(j['compile_ms']))"
  done
done
$B/cli/ejk run flash_attention --backend cuda --dtype bf16 --b 2 --sq 1000 --sk 777 --hq 4 --hkv 4 --d 128 --bias --causal --iters 3 --check --json | tail -1 | cut -c1-200
echo "done ($(( $(date +%s) - t0 )) s)"
rm -f $O/build.log
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
