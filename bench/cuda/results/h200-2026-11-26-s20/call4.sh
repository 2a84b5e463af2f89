#!/bin/bash
# Session 20 call 4: tiles for the padded head_dims (.carry/v72t: v72 plus bench variants).
# check-bench on every bench variant (grids of 3), then every variant at d96, d160, d80, d112
# over the grid (one pass, then a second pass of d96 / d160), then the d96 default paired with
# PyTorch SDPA's cuDNN / FA2 (two passes).
cd "$(dirname "$0")/../../../.."
O=$OUT/c4; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
B=.carry/v72t/check_flash
EJK_PERSISTENT_GRID=3 timeout 200 $B check-bench $RANDOM > $O/check_bench.txt 2>&1
rc=$?; echo "check-bench rc=$rc ($(( $(date +%s) - t0 )) s)"; grep -v "^PASS" $O/check_bench.txt | tail -5
[[ $rc == 0 ]] || exit 1
for pass in 1 2; do
  for d in 96 160 80 112; do
    [[ $pass == 2 && ( $d == 80 || $d == 112 ) ]] && continue
    EJK_BENCH_D=$d timeout 120 $B bench > $O/bench_d$d.p$pass.jsonl 2>&1
  done
  echo "pass $pass done ($(( $(date +%s) - t0 )) s)"
done
python3 - $O <<'PY'
import json, sys, glob, statistics, collections
rows = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/bench_d*.jsonl")):
    for l in open(f):
        if l.startswith("{"):
            r = json.loads(l); rows[(r['d'], int(r['causal']), r['s'], r['variant'])].append(r['tflops'])
best = {}
for (d, c, s, v), t in sorted(rows.items()):
    m = statistics.median(t); print(f"d{d} causal={c} S={s:>5} {v:<44} {m:6.1f} ({min(t):.1f}-{max(t):.1f})")
    if best.get((d, c, s), (0, ""))[0] < m: best[(d, c, s)] = (m, v)
print("best per row:")
for k, (m, v) in sorted(best.items()): print(k, v, m)
PY
left=$(( 560 - ($(date +%s) - t0) ))
[[ $left -gt 60 ]] && timeout $left python3 bench/cuda/paired.py $B $O/paired96 --passes 2 --d 96 > $O/paired96.txt 2>&1; tail -11 $O/paired96.txt
echo "done ($(( $(date +%s) - t0 )) s)"
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
