#!/bin/bash
# Session 6 call 8: the window + softcap + GQA row three times (HEAD through ejk vs Flex), and
# the same key through the session-5 kernel headers (a second tree in .carry/s6/old5).
cd "$(dirname "$0")/../.."
build() {  # $1 source tree, $2 build dir
  cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DEJK_ENABLE_ORC_JIT=OFF -DEJK_BUILD_TESTS=OFF \
    -DEJK_CUDA_ARCHS=90a -DEJK_VARIANTS='cuda.sm90a.bf16.d64.bq128.bk128.causal$' \
    -DCMAKE_PREFIX_PATH="$PWD/.carry/deps/usr" > /tmp/cfg.log 2>&1 && cmake --build $2 -j 16 --target ejk_cli > /tmp/build.log 2>&1 \
    || { tail -20 /tmp/cfg.log /tmp/build.log; exit 1; }
}
build . /tmp/new & build .carry/s6/old5 /tmp/old & wait
for rep in 1 2 3; do
  for s in 4096 8192 16384; do
    b=$((16384 / s))
    for t in new old; do
      ms=$(EJK_CACHE_DIR=/tmp/cache-$t /tmp/$t/cli/ejk run flash_attention --backend cuda --dtype bf16 --b $b --sq $s --sk $s \
        --hq 32 --hkv 8 --d 64 --causal --window 1024,0 --softcap 30 --iters 100 --json | tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["ms"])')
      echo "rep $rep s $s $t $ms"
    done
    python3 bench/cuda/peers.py flash --b $b --hq 32 --hkv 8 --s $s --d 64 --causal --window 1024,0 --softcap 30 2>/dev/null | sed "s/^/rep $rep s $s flex /"
  done
done
