#!/bin/bash
# Session 15 call 2: v55b (call 1's v55 with the per-round rotation only for three consumers:
# two-consumer kernels compile as on main) against main (base), three alternating passes: d64
# 192 x 128 non-causal 1k / 2k / 4k / 16k (pass-on + rotation), d64 causal 1k / 2k / 4k at
# 192 x 128 (pass-on: last q blocks of 64 / 128 rows) and 128 x 128 (the default there, same
# code: control, and the heuristic's comparison), d128 128 x 128 non-causal 1k (same code:
# control). Checks on v55b (full, grids of three, L2 head groups, check-bench on grids of three).
cd "$(dirname "$0")/../../../.."
O=$OUT/c2; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
A=.carry/base/check_flash; B=.carry/v55b/check_flash
t0=$(date +%s)
bash bench/cuda/ab_builds.sh $O/ab 3 base=$A v55b=$B \
  '64:1024,2048,4096,16384:bf16.d64.bq192.bk128.wgmma$' \
  '64:1024,2048,4096:bf16.d64.bq192.bk128.causal.wgmma$,bf16.d64.bq128.bk128.causal.wgmma$' \
  '128:1024:bf16.d128.bq128.bk128.wgmma$' > /dev/null
echo "ab: $(( $(date +%s) - t0 )) s" | tee $O/times.txt
{ timeout 90 $B check 20261126 | tail -1
  EJK_PERSISTENT_GRID=3 timeout 90 $B check $RANDOM | tail -1
  EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 timeout 50 $B check $RANDOM 12 12 | tail -1
  EJK_PERSISTENT_GRID=3 timeout 90 $B check-bench $RANDOM | tail -1; } 2>&1 | tee $O/check.txt
echo "checks: $(( $(date +%s) - t0 )) s" | tee -a $O/times.txt
grep -v "^every\|^$" $O/ab/ab.txt | head -14 | cut -c1-130
echo "total: $(( $(date +%s) - t0 )) s" | tee -a $O/times.txt
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
