#!/bin/bash
# Session 28 call 2: the diagonal tile stays last (ascending keys, as main); the first
# warpgroup issues its S at half width inside the tile loop (a third path beside S + P V and
# P V alone), head_dim 64 128 x 128 causal only. Builds: d26 = main, hl = branch half-last
# (`bash bench/cuda/build_prebuilt.sh .carry/hl`). SASS counts of the default d64 causal kernel
# (v29 saw ptxas close the wgmma groups at the paths' join), then three passes, rotated.
cd "$(dirname "$0")/../../../.."
O=$OUT/c2; mkdir -p $O
R=bench/cuda/results/2026-11-27-s28
K=ELi64ELi128ELi128EXtlNS2_10FlashFlagsELb1ELb0ELb0ELb0ELb0ELb0ELb0EEELb1ELi0ELNS2_12Sm90ScheduleE0ELNS2_12Sm90QOperandE0E
for b in d26 hl; do echo "== $b"; cuobjdump -sass .carry/$b/check_flash | python3 $R/sass_counts.py "$K"; done | tee $O/sass.txt
bash bench/cuda/ab_builds.sh $O 3 d26=.carry/d26/check_flash hl=.carry/hl/check_flash \
  "64:1024,2048,4096:bf16.d64.bq128.bk128.causal.wgmma\$" > $O/ab_run.txt 2>&1
cat $O/ab.txt
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
