#!/bin/bash
# Session 21 call 2 (.carry/v75): a second measurement of the tiles at head_dim 32 / 48 (three
# passes: 192 x 128 against 128 x 128, the basis of the head_dim <= 64 rule), and of d96 (causal
# 128 x 160 / one block per item) and d192 / d224 (block_k), three passes; then d32 and d48 with
# the new rule paired with PyTorch SDPA's cuDNN and FA2 (two passes).
cd "$(dirname "$0")/../../../.."
O=$OUT/c2; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
B=.carry/v75/check_flash
for pass in 1 2 3; do
  for d in 32 48 96 192 224; do
    EJK_BENCH_D=$d timeout 90 $B bench > $O/bench_d$d.p$pass.jsonl 2>&1
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
for d in 32 48; do
  timeout 150 python3 bench/cuda/paired.py $B $O/paired$d --passes 2 --d $d > $O/paired$d.txt 2>&1; tail -12 $O/paired$d.txt
  echo "paired d$d done ($(( $(date +%s) - t0 )) s)"
done
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
