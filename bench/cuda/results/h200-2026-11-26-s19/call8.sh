#!/bin/bash
# Session 19 call 8 (an H100 host, nvidia-h100-x1): call 2's `ejk compile` cold (fresh process, empty cache) of this tree
# against main (.carry/base-src = git archive of 9fc58dc) again, builds alternating, four
# rounds, on an H100 machine; nvidia-smi and the
# CPU model first.
cd "$(dirname "$0")/../../../.."
O=$OUT/c8; mkdir -p $O
nvidia-smi --query-gpu=name --format=csv,noheader > $O/host.txt; lscpu | grep -E 'Model name|^CPU\(s\)|MHz' >> $O/host.txt; cat $O/host.txt
build() {  # src dir, build dir
  cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DEJK_ENABLE_ORC_JIT=OFF -DEJK_BUILD_TESTS=OFF \
    -DEJK_CUDA_ARCHS=90a -DEJK_VARIANTS='cuda.sm90a.bf16.d64.bq128.bk128.causal$' \
    -DCMAKE_PREFIX_PATH="$PWD/.carry/deps/usr" > $O/configure-$(basename $2).log 2>&1 &&
  cmake --build $2 -j 8 --target ejk_cli > $O/build-$(basename $2).log 2>&1
}
build . /tmp/ejk-new & build .carry/base-src /tmp/ejk-old &
wait
ls /tmp/ejk-new/cli/ejk /tmp/ejk-old/cli/ejk || exit 1
for rep in 1 2 3 4; do
  for k in "--arch sm_90a --d 128 --causal" "--arch sm_90a --d 128 --causal --segments" \
           "--arch sm_90a --d 128 --sinks --segments --bias" "--arch sm_90a --d 64" \
           "--arch sm_90a --d 256 --causal" "--arch sm_90a --d 128 --causal --window --softcap"; do
    bs="old new"; [ $((rep % 2)) = 0 ] && bs="new old"
    for b in $bs; do
      rm -rf /tmp/ejk-cc; export CUDA_CACHE_DISABLE=1
      EJK_CACHE_DIR=/tmp/ejk-cc /tmp/ejk-$b/cli/ejk compile flash_attention --backend cuda $k --json 2>&1 | tail -1 |
        python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print(f'$b {r[\"key\"]:58s} compile_ms {r[\"compile_ms\"]:7.1f} regs {r[\"registers\"]}')"
    done
  done
done > $O/compile.txt 2>&1
python3 - $O/compile.txt <<'PY'
import sys, statistics, collections
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    f = l.split()
    if len(f) >= 4 and f[2] == "compile_ms": d[(f[1], f[0])].append(float(f[3]))
    else: print("?", l.strip())
for (k, b), v in sorted(d.items()):
    print(f"{b} {k:58s} median {statistics.median(v):6.0f}  [{', '.join(f'{x:.0f}' for x in v)}]")
PY
cd $OUT && tar czf c8.tgz c8 && rm -rf c8
