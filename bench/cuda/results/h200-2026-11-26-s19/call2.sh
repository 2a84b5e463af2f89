#!/bin/bash
# Session 19 call 2: v68 final (call 1's kernels + the sm90a family's sink loops rolled, and
# runtime_smoke rendering the template's per_item placeholder): its full check, then `ejk
# compile` cold (fresh process, empty cache) of this tree against main (.carry/base-src = git
# archive of 9fc58dc), builds alternating, four rounds.
cd "$(dirname "$0")/../../../.."
O=$OUT/c2; mkdir -p $O
build() {  # src dir, build dir
  cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DEJK_ENABLE_ORC_JIT=OFF -DEJK_BUILD_TESTS=OFF \
    -DEJK_CUDA_ARCHS=90a -DEJK_VARIANTS='cuda.sm90a.bf16.d64.bq128.bk128.causal$' \
    -DCMAKE_PREFIX_PATH="$PWD/.carry/deps/usr" > $O/configure-$(basename $2).log 2>&1 &&
  cmake --build $2 -j 8 --target ejk_cli > $O/build-$(basename $2).log 2>&1
}
build . /tmp/ejk-new & build .carry/base-src /tmp/ejk-old &
EJK_PREBUILT=.carry/v68 OUT=$O/check timeout 300 bash bench/cuda/build_and_check.sh check > $O/check.txt 2>&1
echo "check rc=$?"; grep -h "passed\|SUMMARY\|FAIL" $O/check/*.txt | head -20; grep -c PASS $O/check/runtime_smoke.txt; grep -v PASS $O/check/runtime_smoke.txt | head
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
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
