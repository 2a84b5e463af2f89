#!/bin/bash
# Session 18 call 14: does `.items` keep paying past 16k at head_dim 64 causal (heuristic: from 16k)?
# `ejk run` at 16k, 32k and 64k (H*D = 2048: 32 heads; b = 1), the heuristic's key against the
# same tile forced persistent (--block-q 192 --block-k 128), alternating, three rounds.
cd "$(dirname "$0")/../../../.."
O=$OUT/c14; mkdir -p $O
nvidia-smi --query-gpu=name --format=csv,noheader | tee $O/gpu.txt
B=/tmp/ejk-t
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DEJK_ENABLE_ORC_JIT=OFF -DEJK_BUILD_TESTS=OFF \
  -DEJK_CUDA_ARCHS=90a -DEJK_VARIANTS='cuda.sm90a.bf16.d64.bq192.bk128.causal' \
  -DCMAKE_PREFIX_PATH="$PWD/.carry/deps/usr" > $O/configure.log 2>&1 && cmake --build $B -j 16 --target ejk_cli > $O/build.log 2>&1 || { tail -20 $O/build.log; exit 1; }
for rep in 1 2 3; do
  for s in 16384 32768 65536; do
    for extra in "" "--block-q 192 --block-k 128"; do
      $B/cli/ejk run flash_attention --backend cuda --dtype bf16 --b 1 --sq $s --sk $s --hq 32 --hkv 32 --d 64 \
        --causal $extra --iters 20 --json 2>&1 | tail -1 |
        python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print($s, r['key'].split('.', 5)[-1], round(r['ms'], 4), round(r['gflops'] / 1000, 1))" | tee -a $O/ab.txt
    done
  done
done > /dev/null
sort -k1,1n -k2,2 $O/ab.txt
cd $OUT && tar czf c14.tgz c14 && rm -rf c14
