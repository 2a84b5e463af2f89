#!/bin/bash
# Session 15 call 5: v56 (S(0) of an item issued outside the consumers' turns, as the last P V
# is: a warpgroup starting its item no longer waits for the other's epilogue) against v55b
# (main), three alternating passes over the defaults at short lengths (where items are short)
# and a few long rows; then the checks on v56 (full, grids of three, L2 head groups,
# check-bench on grids of three).
cd "$(dirname "$0")/../../../.."
O=$OUT/c5; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
A=.carry/v55b/check_flash; B=.carry/v56/check_flash
t0=$(date +%s)
bash bench/cuda/ab_builds.sh $O/ab 3 v55b=$A v56=$B \
  '64:1024,2048,4096:bf16.d64.bq128.bk128.causal.wgmma$' \
  '64:1024,8192:bf16.d64.bq192.bk128.wgmma$' \
  '128:1024,2048:bf16.d128.bq128.bk128.causal.wgmma$' \
  '128:1024,8192:bf16.d128.bq128.bk128.wgmma$' \
  '256:1024:bf16.d256.bq128.bk80.causal.wgmma$,bf16.d256.bq128.bk80.wgmma$' > /dev/null
echo "ab: $(( $(date +%s) - t0 )) s" | tee $O/times.txt
grep -v "^every\|^$" $O/ab/ab.txt | sed -n '12,40p' | cut -c1-130
{ timeout 90 $B check 20261127 | tail -1
  EJK_PERSISTENT_GRID=3 timeout 90 $B check $RANDOM | tail -1
  EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 timeout 50 $B check $RANDOM 12 12 | tail -1
  EJK_PERSISTENT_GRID=3 timeout 90 $B check-bench $RANDOM | tail -1; } 2>&1 | tee $O/check.txt
echo "total: $(( $(date +%s) - t0 )) s" | tee -a $O/times.txt
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
