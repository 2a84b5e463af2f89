#!/bin/bash
# Session 20 call 1: v71 (head_dims that are no multiple of 64 on the wgmma family, tiles padded
# to the next multiple: d96 as d128, d160 as d192). Full check (with the new padded variants
# 35-42 of check_variants), memcheck / racecheck on the new ones, then d96 and d160: every
# bench variant (padded wgmma against the sm80 family those keys ran before), and the default
# key paired with PyTorch SDPA's cuDNN and FA2 (two passes).
cd "$(dirname "$0")/../../../.."
O=$OUT/c1; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
nproc >> $O/gpu.txt; lscpu | grep "Model name" >> $O/gpu.txt
t0=$(date +%s)
EJK_PREBUILT=.carry/v71 OUT=$O/check timeout 330 bash bench/cuda/build_and_check.sh check > $O/check.txt 2>&1
echo "check rc=$? ($(( $(date +%s) - t0 )) s)"; grep -v "^PASS\|regs" $O/check.txt | tail -25
B=.carry/v71/check_flash
for v in "8 35"; do
  EJK_PERSISTENT_GRID=5 timeout 90 compute-sanitizer --tool memcheck --print-limit 5 $B check 8 $v | tail -2
done > $O/sanitizers_padded.txt 2>&1
for v in "4 35" "4 39"; do
  EJK_PERSISTENT_GRID=5 timeout 90 compute-sanitizer --tool racecheck --print-limit 5 $B check 9 $v | tail -2
done >> $O/sanitizers_padded.txt 2>&1
cat $O/sanitizers_padded.txt; echo "sanitizers done ($(( $(date +%s) - t0 )) s)"
for d in 96 160; do
  EJK_BENCH_D=$d timeout 60 $B bench > $O/bench_d$d.jsonl 2>&1
done
python3 - $O <<'PY'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/bench_d*.jsonl")):
    for l in open(f):
        if l.startswith("{"):
            r = json.loads(l); print(f"d{r['d']} S={r['s']:>5} causal={int(r['causal'])} {r['variant']:<40} {r['tflops']:6.1f}")
PY
echo "bench done ($(( $(date +%s) - t0 )) s)"
timeout 200 python3 bench/cuda/paired.py $B $O/paired96 --passes 2 --d 96 > $O/paired96.txt 2>&1; tail -12 $O/paired96.txt
echo "paired d96 done ($(( $(date +%s) - t0 )) s)"
left=$(( 560 - ($(date +%s) - t0) ))
[[ $left -gt 60 ]] && timeout $left python3 bench/cuda/paired.py $B $O/paired160 --passes 1 --d 160 > $O/paired160.txt 2>&1; tail -12 $O/paired160.txt
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
