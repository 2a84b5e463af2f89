#!/bin/bash
# Session 14 call 10: the ramp case steeper (key_ramp 3: keys scaled up to ~27x along the
# sequence, so that more rows rise past the lag in every variant; in call 5 a few wgmma variants'
# single ramp case passed the mutant). v55 (main's kernels) must pass the full check and grids
# of three; v55mut (rescale_o never applies its factors) must fail the ramp case of every
# wgmma variant. C=c11: the same binaries rebuilt from a later harness (call11.sh).
cd "$(dirname "$0")/../../../.."
C=${C:-c10}; O=$OUT/$C; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
{ timeout 90 .carry/v55/check_flash check 20261121 | tail -1
  EJK_PERSISTENT_GRID=3 timeout 90 .carry/v55/check_flash check $RANDOM | tail -1; } 2>&1 | tee $O/check.txt
timeout 90 .carry/v55mut/check_flash check 20261121 > $O/mutant.txt 2>&1
{ echo "mutant FAIL lines: $(grep -c '^FAIL' $O/mutant.txt)"
  echo "wgmma ramp cases passing the mutant: $(grep '^PASS.*wgmma.* ramp ' $O/mutant.txt | wc -l)"
  grep '^PASS.*wgmma.* ramp ' $O/mutant.txt | cut -c1-150
  echo "wgmma ramp cases failing the mutant: $(grep '^FAIL.*wgmma.* ramp ' $O/mutant.txt | wc -l)"
  tail -1 $O/mutant.txt; } | tee $O/mutant_summary.txt
cd $OUT && tar czf $C.tgz $C && rm -rf $C
