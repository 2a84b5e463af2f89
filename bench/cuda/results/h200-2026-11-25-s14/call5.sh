#!/bin/bash
# Session 14 call 5: main's kernels (v50) with the harness's key-ramp case (rows whose max rises
# past the lag mid-item, so the reference max moves and O is rescaled): the full check, grids of
# three, L2 head groups and check-bench on grids of three must pass; the mutant mainr_mut
# (rescale_o never applies its factors) must fail the ramp cases and nothing else. Then the
# issue's grid paired with the SDPA peers row by row (paired.py, two passes) on this card.
cd "$(dirname "$0")/../../../.."
O=$OUT/c5; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/gpu.txt
B=.carry/mainr/check_flash
t0=$(date +%s)
{ timeout 100 $B check 20261121 | tail -1
  EJK_PERSISTENT_GRID=3 timeout 100 $B check $RANDOM | tail -1
  EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 timeout 60 $B check $RANDOM 12 12 | tail -1
  EJK_PERSISTENT_GRID=3 timeout 100 $B check-bench $RANDOM | tail -1; } 2>&1 | tee $O/check.txt
timeout 80 .carry/mainr_mut/check_flash check 20261121 > $O/mutant.txt 2>&1
{ echo "mutant FAIL lines: $(grep -c '^FAIL' $O/mutant.txt)"
  grep '^FAIL' $O/mutant.txt | cut -c1-160 | head -8; tail -1 $O/mutant.txt; } | tee $O/mutant_summary.txt
echo "checks: $(( $(date +%s) - t0 )) s" | tee $O/times.txt
PYTHONUNBUFFERED=1 timeout $(( 560 - ($(date +%s) - t0) )) python3 bench/cuda/paired.py $B $O/paired --passes 2 > $O/paired.txt 2>&1
cat $O/paired.txt | cut -c1-120
echo "total: $(( $(date +%s) - t0 )) s" | tee -a $O/times.txt
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
