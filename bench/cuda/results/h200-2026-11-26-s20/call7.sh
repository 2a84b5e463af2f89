#!/bin/bash
# Session 20 call 7: v74 (v73 made permanent: three causal consumers take records, draw their
# items and stop at their own last key tile; the heuristic takes 192 x 128 for head_dim 64
# causal from 2k). Checks on the variants it touches (grids of 3: the check list's wgmma
# variants, the bench list), then head_dim 64 causal paired with PyTorch SDPA's cuDNN / FA2
# (two passes) and, at 8k / 16k, the persistent 192 x 128 against its one-block-per-item twin
# (the heuristic's choice from 16k), three passes.
cd "$(dirname "$0")/../../../.."
O=$OUT/c7; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
B=.carry/v74/check_flash
ok=1
timeout 120 $B check 20261126 > $O/check.txt 2>&1 || ok=0
EJK_PERSISTENT_GRID=3 timeout 120 $B check $RANDOM 31 12 > $O/check_grid3.txt 2>&1 || ok=0
EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 timeout 120 $B check $RANDOM 12 12 > $O/check_l2.txt 2>&1 || ok=0
EJK_PERSISTENT_GRID=3 EJK_NO_TILE_COUNTER=1 timeout 120 $B check $RANDOM 12 12 > $O/check_nocounter.txt 2>&1 || ok=0
EJK_PERSISTENT_GRID=3 timeout 200 $B check-bench $RANDOM > $O/check_bench.txt 2>&1 || ok=0
tail -qn1 $O/check*.txt; echo "checks ok=$ok ($(( $(date +%s) - t0 )) s)"
[[ $ok == 1 ]] || { grep -hv "^PASS" $O/check*.txt | head; exit 1; }
timeout 240 python3 bench/cuda/paired.py $B $O/paired64c --passes 2 --d 64 --causal 1 > $O/paired64c.txt 2>&1; tail -6 $O/paired64c.txt
echo "paired done ($(( $(date +%s) - t0 )) s)"
V='bf16.d64.bq192.bk128.causal.wgmma$,bf16.d64.bq192.bk128.causal.wgmma.per_item$'
timeout 120 bash bench/cuda/ab_builds.sh $O/ab16k 3 v74=$B "64:8192,16384:$V" > $O/ab16k.txt 2>&1; tail -4 $O/ab16k.txt
echo "done ($(( $(date +%s) - t0 )) s)"
cd $OUT && tar czf c7.tgz c7 && rm -rf c7
