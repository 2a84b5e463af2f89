#!/usr/bin/env bash
# sched call 4: D binary only; group budget sweep on B*S = 128k-token shapes (in-binary A/B)
set -uo pipefail
d=.carry/sched; out=${OUT:-out}; mkdir -p $out
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
D=$d/D/check_flash; P=$d/D/check_flash_probe; t0=$(date +%s)
EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=2 timeout 100 $D check $RANDOM 12 12 > $out/checks.txt || { tail -1 $out/checks.txt; echo "CHECK FAILED"; exit 1; }
tail -1 $out/checks.txt
for r in 1 2; do for S in 4096 8192 16384; do
  EJK_BENCH_TOKENS=131072 EJK_BENCH_S=$S EJK_BENCH_CAUSAL=1 EJK_BENCH_L2=1099511627776,0,25165824,12582912 EJK_BENCH_VARIANTS=causal.wgmma $D bench >> $out/Dbig_causal.jsonl
done; done
echo "big: $(( $(date +%s) - t0 )) s"
for S in 4096 16384; do
  EJK_BENCH_TOKENS=131072 EJK_BENCH_S=$S EJK_BENCH_D=128 EJK_BENCH_CAUSAL=1 EJK_BENCH_L2=1099511627776,0,25165824,12582912 EJK_BENCH_VARIANTS=causal.wgmma $P bench >> $out/Dprobe_causal.jsonl
done
echo "done: $(( $(date +%s) - t0 )) s"
python3 $d/summ.py $out
