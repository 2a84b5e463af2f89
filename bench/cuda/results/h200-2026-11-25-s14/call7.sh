#!/bin/bash
# Session 14 call 7: v54 (blocks that draw their items take 8 MiB head groups when the host
# gives no budget; the static snake keeps 48 MiB) against main (mainr = v50 + the ramp case),
# three alternating passes over the drawing defaults (d64 / d128 causal 128 x 128) and the
# 192 x 128 / 128 x 80 / 128 x 192 causal defaults as controls (unchanged code); the checks on
# v54 (full, grids of three, L2 head groups, no counter, check-bench on grids of three); then
# the issue's grid paired with the SDPA peers (two passes) on v54.
cd "$(dirname "$0")/../../../.."
O=$OUT/c7; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
A=.carry/mainr/check_flash; B=.carry/v54/check_flash
t0=$(date +%s)
bash bench/cuda/ab_builds.sh $O/ab 3 v50=$A v54=$B \
  '64:1024,2048,4096:bf16.d64.bq128.bk128.causal.wgmma$' \
  '64:4096:bf16.d64.bq192.bk128.causal.wgmma$' \
  '128:1024,2048,4096,8192:bf16.d128.bq128.bk128.causal.wgmma$' \
  '128:16384:bf16.d128.bq128.bk192.causal.wgmma$' \
  '256:1024:bf16.d256.bq128.bk80.causal.wgmma$' > /dev/null
echo "ab: $(( $(date +%s) - t0 )) s" | tee $O/times.txt
{ timeout 90 $B check 20261121 | tail -1
  EJK_PERSISTENT_GRID=3 timeout 90 $B check $RANDOM | tail -1
  EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 timeout 50 $B check $RANDOM 12 12 | tail -1
  EJK_PERSISTENT_GRID=3 EJK_NO_TILE_COUNTER=1 timeout 50 $B check $RANDOM 12 12 | tail -1
  EJK_PERSISTENT_GRID=3 timeout 90 $B check-bench $RANDOM | tail -1; } 2>&1 | tee $O/check.txt
echo "checks: $(( $(date +%s) - t0 )) s" | tee -a $O/times.txt
PYTHONUNBUFFERED=1 timeout $(( 570 - ($(date +%s) - t0) )) python3 bench/cuda/paired.py $B $O/paired --passes 2 > $O/paired.txt 2>&1
grep -v "^every\|^$" $O/ab/ab.txt | head -12 | cut -c1-130
cut -c1-120 $O/paired.txt
echo "total: $(( $(date +%s) - t0 )) s" | tee -a $O/times.txt
cd $OUT && tar czf c7.tgz c7 && rm -rf c7
