#!/bin/bash
# Session 7 call 2: three consumer warpgroups take GEMM turns in a ring (v24; .carry/v30 built
# by its build.sh). Check (fixed seed; random seeds on persistent grids of 3, check and
# check-bench), racecheck / memcheck on the ring kernels (check variants 20, 21), then head_dim
# 64 bq192 with the ring (default) and without (.nopp) interleaved in one binary, two passes.
cd "$(dirname "$0")/../../../.."
B=.carry/v30
O=$OUT/c2; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ok=1
timeout 100 $B/check_flash check 20261121 > $O/check.txt || ok=0; tail -1 $O/check.txt
EJK_PERSISTENT_GRID=3 timeout 150 $B/check_flash check $RANDOM > $O/check_random.txt || ok=0; tail -1 $O/check_random.txt
EJK_PERSISTENT_GRID=3 timeout 150 $B/check_flash check-bench $RANDOM > $O/check_bench.txt || ok=0; tail -1 $O/check_bench.txt
grep -v ^PASS $O/check*.txt | grep -v "passed" | head -5
[[ $ok == 1 ]] || { echo "CHECK FAILED: not timing"; exit 1; }
for v in 20 21; do
  EJK_PERSISTENT_GRID=5 timeout 120 compute-sanitizer --tool racecheck --print-limit 5 $B/check_flash check 9 1 $v 2>&1 | tail -2
done
EJK_PERSISTENT_GRID=5 timeout 120 compute-sanitizer --tool memcheck --print-limit 5 $B/check_flash check 8 2 20 2>&1 | tail -2
export EJK_BENCH_VARIANTS=d64.bq192.bk128
for pass in 1 2; do timeout 150 $B/check_flash bench > $O/ab$pass.jsonl; done
python3 - $O/ab1.jsonl $O/ab2.jsonl <<'PY'
import json, sys, collections
t = collections.defaultdict(lambda: collections.defaultdict(list))
for f in sys.argv[1:]:
    for l in open(f):
        r = json.loads(l); t[(r["causal"], r["s"])][r["variant"].replace("bf16.d64.bq192.bk128.", "")].append(r["tflops"])
for k in sorted(t):
    row = t[k]; ring = row.get("causal.wgmma" if k[0] else "wgmma"); nopp = row.get("causal.wgmma.nopp" if k[0] else "wgmma.nopp")
    print(k, {v: x for v, x in sorted(row.items())}, "ring/nopp %.3f" % (max(ring) / max(nopp)))
PY
