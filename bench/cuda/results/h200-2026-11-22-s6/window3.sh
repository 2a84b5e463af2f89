#!/bin/bash
# Session 6 call 9: new (HEAD) / mid (HEAD with finish after the last P V's wait) / old (session 5)
# through ejk: the window + softcap + GQA row, and two plain short-S defaults; 3 rounds.
cd "$(dirname "$0")/../.."
build() {
  cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DEJK_ENABLE_ORC_JIT=OFF -DEJK_BUILD_TESTS=OFF \
    -DEJK_CUDA_ARCHS=90a -DEJK_VARIANTS='cuda.sm90a.bf16.d64.bq128.bk128.causal$' \
    -DCMAKE_PREFIX_PATH="$PWD/.carry/deps/usr" > /tmp/cfg-$3.log 2>&1 && cmake --build $2 -j 6 --target ejk_cli > /tmp/build-$3.log 2>&1 \
    || { tail -20 /tmp/cfg-$3.log /tmp/build-$3.log; exit 1; }
}
build . /tmp/new new & build .carry/s6/mid /tmp/mid mid & build .carry/s6/old5 /tmp/old old & wait
run() { EJK_CACHE_DIR=/tmp/cache-$1 /tmp/$1/cli/ejk run flash_attention --backend cuda --dtype bf16 --iters 100 --json "${@:2}" | tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["ms"])'; }
for rep in 1 2 3; do
  for s in 4096 8192 16384; do
    b=$((16384 / s))
    for t in new mid old; do
      echo "rep $rep win s $s $t $(run $t --b $b --sq $s --sk $s --hq 32 --hkv 8 --d 64 --causal --window 1024,0 --softcap 30)"
    done
  done
  for t in new mid old; do
    echo "rep $rep d64c1k s 1024 $t $(run $t --b 16 --sq 1024 --sk 1024 --hq 32 --hkv 32 --d 64 --causal)"
    echo "rep $rep d128c1k s 1024 $t $(run $t --b 16 --sq 1024 --sk 1024 --hq 16 --hkv 16 --d 128 --causal)"
    echo "rep $rep d256n1k s 1024 $t $(run $t --b 16 --sq 1024 --sk 1024 --hq 8 --hkv 8 --d 256)"
  done
done | tee $OUT/window3.txt
python3 - $OUT/window3.txt <<'PY'
import sys, collections, statistics
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    f = l.split(); d[(f[2], int(f[4]), f[5])].append(float(f[6]))
for k in sorted({k[:2] for k in d}):
    med = {t: statistics.median(d[k + (t,)]) for t in ("new", "mid", "old")}
    print(*k, " ".join(f"{t} {v:.4f}" for t, v in med.items()), f"new/old {med['old']/med['new']:.3f} mid/old {med['old']/med['mid']:.3f}")
PY
