#!/bin/bash
# Session 22 call 5 (.carry/v79 = main's kernels (v78) + bias rows in the bench): how fast the
# bias kernels run (EJK_BENCH_BIAS=1, a random [B, Hq, S, S] bf16 bias) against the plain keys
# of the same tiles, two passes; NVRTC phases of the segments keys before (.carry/oldk: the
# kernels of dad9c96) and after, interleaved, on this host; runtime_smoke run-large (call 4's
# check ran out of its time before it).
cd "$(dirname "$0")/../../../.."
O=$OUT/c5; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
lscpu | grep -m1 "Model name" >> $O/gpu.txt
t0=$(date +%s)
B=.carry/v79/check_flash
for pass in 1 2; do
  for d in 64 128; do
    EJK_BENCH_GRID=0 EJK_BENCH_BIAS=1 EJK_BENCH_D=$d timeout 120 $B bench >> $O/bias.p$pass.jsonl 2>&1
    for s in 1024 4096 16384; do
      EJK_BENCH_D=$d EJK_BENCH_S=$s EJK_BENCH_VARIANTS='d64.bq192.bk128.wgmma$,d64.bq192.bk128.causal.wgmma$,d128.bq128.bk128.wgmma$,d128.bq128.bk128.causal.wgmma$' \
        timeout 60 $B bench >> $O/plain.p$pass.jsonl 2>&1
    done
  done
done
echo "bench done ($(( $(date +%s) - t0 )) s)"
python3 - $O <<'PY'
import json, sys, glob, statistics, collections
rows = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/*.p*.jsonl")):
    for l in open(f):
        if l.startswith("{"):
            r = json.loads(l); rows[(r['d'], int(r['causal']), r['s'], r['variant'])].append((r['tflops'], r['ms']))
for (d, c, s, v), t in sorted(rows.items()):
    tf = [x[0] for x in t]; ms = [x[1] for x in t]
    print(f"d{d} causal={c} S={s:>5} {v:<40} {statistics.median(tf):6.1f} TFLOP/s {statistics.median(ms):8.3f} ms ({min(tf):.1f}-{max(tf):.1f})")
PY
for r in 1 2 3; do
  for k in "--d 128 --causal --segments" "--d 64 --bq 192 --segments" "--d 128 --causal"; do
    for tree in old new; do
      if [[ $tree == old ]]; then dir=.carry/oldk; else dir=.; fi
      (cd $dir && timeout 30 python3 $OLDPWD/bench/cuda/nvrtc_phases.py $k --runs 1 2>&1 | tail -1 | sed "s/^/$tree /")
    done
  done
done | tee $O/nvrtc.txt
timeout 150 .carry/v79/runtime_smoke run-large > $O/run_large.txt 2>&1; echo "run-large rc=$?"; tail -4 $O/run_large.txt
echo "all done ($(( $(date +%s) - t0 )) s)"
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
