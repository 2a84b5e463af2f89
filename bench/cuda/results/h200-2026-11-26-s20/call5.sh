#!/bin/bash
# Session 20 call 5: block_k for the tiles of 192 and 256 columns (.carry/v72u: v72 plus bench
# variants): d192 and d224 at 128 x 64 / 80 / 96, and d160 again; check-bench first, two passes.
cd "$(dirname "$0")/../../../.."
O=$OUT/c5; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
B=.carry/v72u/check_flash
EJK_PERSISTENT_GRID=3 timeout 200 $B check-bench $RANDOM > $O/check_bench.txt 2>&1
rc=$?; echo "check-bench rc=$rc ($(( $(date +%s) - t0 )) s)"; grep -v "^PASS" $O/check_bench.txt | tail -5
[[ $rc == 0 ]] || exit 1
for pass in 1 2; do
  for d in 192 224 160; do
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
for (d, c, s, v), t in sorted(rows.items()):
    print(f"d{d} causal={c} S={s:>5} {v:<40} {statistics.median(t):6.1f} ({min(t):.1f}-{max(t):.1f})")
PY
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
