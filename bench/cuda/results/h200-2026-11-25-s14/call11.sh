#!/bin/bash
# Session 14 call 11: call 10 left four wgmma ramp cases passing the mutant: three causal ones
# with Sq < Sk (masks are top-left aligned: every row saw only the first key tile) and one with
# a small softcap. The ramp case is now square with softcap 30. v55 must pass the full check and
# grids of three; v55mut (rescale_o never applies its factors) must fail every wgmma ramp case.
cd "$(dirname "$0")/../../../.."
O=$OUT/c11; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
{ timeout 90 .carry/v55/check_flash check 20261121 | tail -1
  EJK_PERSISTENT_GRID=3 timeout 90 .carry/v55/check_flash check $RANDOM | tail -1; } 2>&1 | tee $O/check.txt
timeout 90 .carry/v55mut/check_flash check 20261121 > $O/mutant.txt 2>&1
{ echo "mutant FAIL lines: $(grep -c '^FAIL' $O/mutant.txt)"
  echo "wgmma ramp cases passing the mutant: $(grep '^PASS.*wgmma.* ramp ' $O/mutant.txt | wc -l)"
  grep '^PASS.*wgmma.* ramp ' $O/mutant.txt | cut -c1-150
  echo "wgmma ramp cases failing the mutant: $(grep '^FAIL.*wgmma.* ramp ' $O/mutant.txt | wc -l)"
  tail -1 $O/mutant.txt; } | tee $O/mutant_summary.txt
cd $OUT && tar czf c11.tgz c11 && rm -rf c11
