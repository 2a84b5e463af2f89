#!/bin/bash
# Session 26 call 3: does the split tail run, and what does it do to the tail? The probe build
# of s26 (p26s: -DEJK_SM90_PROBE) on the plain 128x128 keys, d64 and d128, 1k and 16k, with
# and without EJK_NO_SPLIT=1: per-block spans (idle_pct: SM time with no block, i.e. the tail)
# and the phases per item; nvidia-smi's SM clock sampled during a d128 16k run of each.
cd "$(dirname "$0")/../../../.."
O=$OUT/c3; mkdir -p $O
B=.carry/p26s/check_flash
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
cat $O/gpu.txt
for run in 1 2; do
for split in 0 1; do
  for d in 64 128; do for s in 1024 16384; do
    EJK_NO_SPLIT=$((1 - split)) EJK_BENCH_D=$d EJK_BENCH_S=$s EJK_BENCH_CAUSAL=0 \
      EJK_BENCH_VARIANTS="d$d.bq128.bk128.wgmma\$" timeout 60 $B bench | sed "s/^{/{\"split\": $split, /" >> $O/probe.txt 2>&1
  done; done
done; done
python3 - $O <<'PY'
import json, sys
for l in open(f"{sys.argv[1]}/probe.txt"):
    if not l.startswith("{"): continue
    j = json.loads(l); pr = j.get("probe", {})
    print("split" if j["split"] else "whole", j["d"], j["s"], f'{j["tflops"]:.1f}', " ".join(f"{k}={pr[k]}" for k in ("span_us", "idle_pct", "finish", "stage", "store", "loop_per_tile", "tiles_per_item")))
PY
for split in 0 1; do
  ( nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader -lms 20 > $O/clocks_$split.txt & echo $! > $O/smi.pid )
  sleep 1
  EJK_NO_SPLIT=$((1 - split)) EJK_BENCH_D=128 EJK_BENCH_S=16384 EJK_BENCH_CAUSAL=0 \
    EJK_BENCH_VARIANTS='d128.bq128.bk128.wgmma$' timeout 60 .carry/s26/check_flash bench > /dev/null
  kill $(cat $O/smi.pid)
  echo "split=$split clocks: $(sort $O/clocks_$split.txt | awk -F, '{print $1}' | sort | uniq -c | sort -rn | head -4 | tr '\n' ';')"
done
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
