#!/bin/bash
# Session 18 call 13: after the generic tuning-flag loop in flash_key: `ejk run` picks the
# `.items` key for head_dim 64 causal at 16k (and not at 8k, nor with the caller's blocks).
cd "$(dirname "$0")/../../../.."
O=$OUT/c13; mkdir -p $O
B=/tmp/ejk-t
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DEJK_ENABLE_ORC_JIT=OFF -DEJK_BUILD_TESTS=OFF \
  -DEJK_CUDA_ARCHS=90a -DEJK_VARIANTS='cuda.sm90a.bf16.d64.bq192.bk128.causal' \
  -DCMAKE_PREFIX_PATH="$PWD/.carry/deps/usr" > $O/configure.log 2>&1 && cmake --build $B -j 16 --target ejk_cli > $O/build.log 2>&1 || { tail -20 $O/build.log; exit 1; }
for args in "--sq 16384 --sk 16384" "--sq 8192 --sk 8192" "--sq 16384 --sk 16384 --block-q 192 --block-k 128"; do
  $B/cli/ejk run flash_attention --backend cuda --dtype bf16 --b 1 --hq 4 --hkv 4 --d 64 --causal $args \
    --iters 3 --json 2>&1 | tail -1 | tee -a $O/keys.jsonl | grep -o '"key":"[^"]*","load_ms":[0-9.]*\|"source":"[a-z]*"' | paste -sd' '
done
cd $OUT && tar czf c13.tgz c13 && rm -rf c13
