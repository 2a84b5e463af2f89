#!/bin/bash
# Session 18 call 9 (call 8 again, CUDA_CACHE_DISABLE=1 for both builds: in call 8 the old
# build answered rounds 2-4 from the driver's compute cache, ~0.25 s): `ejk compile` cold (fresh process, empty cache) with NVRTC's --no-cache
# (this tree) against without (.carry/base-src = git archive of f03c628),
# alternating, four rounds; one AOT variant in both builds, so every key below is compiled.
cd "$(dirname "$0")/../../../.."
O=$OUT/c9; mkdir -p $O
build() {  # src dir, build dir
  cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DEJK_ENABLE_ORC_JIT=OFF -DEJK_BUILD_TESTS=OFF \
    -DEJK_CUDA_ARCHS=90a -DEJK_VARIANTS='cuda.sm90a.bf16.d64.bq128.bk128.causal$' \
    -DCMAKE_PREFIX_PATH="$PWD/.carry/deps/usr" > $O/configure-$(basename $2).log 2>&1 &&
  cmake --build $2 -j 8 --target ejk_cli > $O/build-$(basename $2).log 2>&1
}
build . /tmp/ejk-new & build .carry/base-src /tmp/ejk-old & wait
ls /tmp/ejk-new/cli/ejk /tmp/ejk-old/cli/ejk || exit 1
for rep in 1 2 3 4; do
  for k in "--arch sm_90a --d 128 --causal" "--arch sm_90a --d 128 --causal --segments" \
           "--arch sm_90a --d 128 --sinks --segments --bias" "--arch sm_90a --d 64" "--arch sm_80 --d 112"; do
    bs="old new"; [ $((rep % 2)) = 0 ] && bs="new old"
    for b in $bs; do
      rm -rf /tmp/ejk-cc; export CUDA_CACHE_DISABLE=1
      EJK_CACHE_DIR=/tmp/ejk-cc /tmp/ejk-$b/cli/ejk compile flash_attention --backend cuda $k --json 2>&1 | tail -1 |
        python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print(f'$b {r[\"key\"]:58s} compile_ms {r[\"compile_ms\"]:7.1f}')"
    done
  done
done > $O/compile.txt 2>&1
sort -k2,2 -k1,1 -s $O/compile.txt
cd $OUT && tar czf c9.tgz c9 && rm -rf c9
