#!/bin/bash
# Session 18 call 6: NVRTC's warm-up (NvrtcCompiler::warm_up, started when the CLI finds the
# GPU) against none (EJK_NVRTC_WARMUP=0): `ejk run` processes with an empty kernel cache and the
# driver's compute cache off, so each compiles its key once, cold; the modes alternate.
# One AOT variant only (the keys below are JIT compiles).
cd "$(dirname "$0")/../../../.."
O=$OUT/c6; mkdir -p $O
B=/tmp/ejk-w
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DEJK_ENABLE_ORC_JIT=OFF -DEJK_BUILD_TESTS=OFF \
  -DEJK_CUDA_ARCHS=90a -DEJK_VARIANTS='cuda.sm90a.bf16.d64.bq128.bk128.causal$' \
  -DCMAKE_PREFIX_PATH="$PWD/.carry/deps/usr" > $O/configure.log 2>&1 || { tail -20 $O/configure.log; exit 1; }
cmake --build $B -j 16 --target ejk_cli > $O/build.log 2>&1 || { grep -E "error" $O/build.log | head; exit 1; }
export CUDA_CACHE_DISABLE=1
for rep in 1 2 3; do
  for args in "--sq 2048 --sk 2048 --d 128 --causal" "--sq 2048 --sk 2048 --d 128 --causal --segments" \
              "--sq 1000 --sk 1000 --d 128 --segments --sinks --bias" "--sq 2048 --sk 2048 --d 64"; do
    for w in 1 0; do
      rm -rf /tmp/ejk-wc
      t0=$(date +%s%N)
      j=$(EJK_CACHE_DIR=/tmp/ejk-wc EJK_NVRTC_WARMUP=$w $B/cli/ejk run flash_attention --backend cuda \
          --dtype bf16 --b 1 --hq 16 --hkv 16 $args --iters 1 --json 2>&1 | tail -1)
      t1=$(date +%s%N)
      echo "$j" | python3 -c "import json,sys; t=sys.stdin.read(); r=json.loads(t) if t.startswith('{') else sys.exit('warmup=$w $args: ' + t[:300]); print(f'warmup=$w {r[\"key\"]:55s} {r[\"source\"]:5s} compile_ms {r[\"compile_ms\"]:7.1f} process_ms $(( (t1 - t0) / 1000000 ))')" | tee -a $O/warm.txt
    done
  done
done > /dev/null 2> $O/errors.txt
head -5 $O/errors.txt
sort -k2,2 -k1,1 $O/warm.txt
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
