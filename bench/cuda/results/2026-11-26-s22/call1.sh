#!/bin/bash
# Session 22 call 1 (.carry/v76 = main's kernels + the bench variants of session 21's Next):
# d192 (128 x 96 persistent against the one-block-per-item default, causal 1k the row below
# cuDNN) and d32 (192 x 128 causal one block per item at 16k), three passes; the issue's grid
# paired with PyTorch SDPA (three passes, the per-item rows timed on the rule's schedule);
# NVRTC phases of the d128 keys on this host.
cd "$(dirname "$0")/../../../.."
O=$OUT/c1; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
lscpu | grep -m1 "Model name" >> $O/gpu.txt
t0=$(date +%s)
B=.carry/v76/check_flash
for pass in 1 2 3; do
  for d in 192 32; do
    EJK_BENCH_D=$d timeout 90 $B bench > $O/bench_d$d.p$pass.jsonl 2>&1
  done
done
echo "bench done ($(( $(date +%s) - t0 )) s)"
python3 - $O <<'PY'
import json, sys, glob, statistics, collections
rows = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/bench_d*.jsonl")):
    for l in open(f):
        if l.startswith("{"):
            r = json.loads(l); rows[(r['d'], int(r['causal']), r['s'], r['variant'])].append(r['tflops'])
for (d, c, s, v), t in sorted(rows.items()):
    print(f"d{d} causal={c} S={s:>5} {v:<44} {statistics.median(t):6.1f} ({min(t):.1f}-{max(t):.1f})")
PY
timeout 200 python3 bench/cuda/paired.py $B $O/paired --passes 3 > $O/table.txt 2>&1
echo "paired rc=$? ($(( $(date +%s) - t0 )) s)"; tail -32 $O/table.txt
for k in "--d 128 --causal" "--d 128 --causal --segments" "--d 112 --causal" "--d 64 --causal --bq 192"; do
  timeout 40 python3 bench/cuda/nvrtc_phases.py $k --runs 3 2>&1 | tail -1
done | tee $O/nvrtc.txt
echo "all done ($(( $(date +%s) - t0 )) s)"
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
