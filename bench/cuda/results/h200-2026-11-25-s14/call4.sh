#!/bin/bash
# Session 14 call 4 (the session's first three calls' results were lost with its machine): v52
# (after an item's first tile the consumers take the exponentials against the old reference
# max at once and check the tile's max afterwards, redoing the tile when a row raises it)
# against main (v50), three alternating passes over the heuristic's defaults; checks on v52,
# whose harness adds a key-ramp case per variant (rows whose max rises by more than the lag);
# the mutant v52mut (the redo path never taken) must fail those.
cd "$(dirname "$0")/../../../.."
O=$OUT/c4; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
A=.carry/v50/check_flash; B=.carry/v52/check_flash
t0=$(date +%s)
bash bench/cuda/ab_builds.sh $O/ab 3 v50=$A v52=$B \
  '64:1024:bf16.d64.bq128.bk128.wgmma$,bf16.d64.bq128.bk128.causal.wgmma$' \
  '64:2048:bf16.d64.bq192.bk128.wgmma$,bf16.d64.bq128.bk128.causal.wgmma$' \
  '64:4096,16384:bf16.d64.bq192.bk128.wgmma$,bf16.d64.bq192.bk128.causal.wgmma$' \
  '128:1024,4096,16384:bf16.d128.bq128.bk128.wgmma$,bf16.d128.bq128.bk128.causal.wgmma$' \
  '128:16384:bf16.d128.bq128.bk192.causal.wgmma$' \
  '256:1024,4096,16384:bf16.d256.bq128.bk80.wgmma$,bf16.d256.bq128.bk80.causal.wgmma$' > /dev/null
echo "ab: $(( $(date +%s) - t0 )) s" | tee $O/times.txt
{ timeout 100 $B check 20261121 | tail -1
  EJK_PERSISTENT_GRID=3 timeout 100 $B check $RANDOM | tail -1
  EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 timeout 60 $B check $RANDOM 12 12 | tail -1
  EJK_PERSISTENT_GRID=3 timeout 100 $B check-bench $RANDOM | tail -1; } 2>&1 | tee $O/check.txt
timeout 80 .carry/v52mut/check_flash check 20261121 > $O/mutant.txt 2>&1
{ echo "mutant FAIL lines: $(grep -c '^FAIL' $O/mutant.txt)"; grep '^FAIL' $O/mutant.txt | head -5 | cut -c1-200; tail -1 $O/mutant.txt; } | tee $O/mutant_summary.txt
echo "total: $(( $(date +%s) - t0 )) s" | tee -a $O/times.txt
cat $O/ab/ab.txt | head -30
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
