#!/bin/bash
# Session 28 call 8: the mask decides each half of a tile for the whole warp (a half every row
# sees whole: skipped; a half no row sees: -inf without compares; the rest compared as before).
# Builds: d26 = main, mh = branch mask-halves (`bash bench/cuda/build_prebuilt.sh .carry/mh`).
# The check (mh), then three passes, rotated: the causal rows and one window row.
cd "$(dirname "$0")/../../../.."
O=$OUT/c8; mkdir -p $O
(time .carry/mh/check_flash check) > $O/check.txt 2>&1; tail -3 $O/check.txt
bash bench/cuda/ab_builds.sh $O 3 d26=.carry/d26/check_flash mh=.carry/mh/check_flash \
  "64:1024,2048,4096:bf16.d64.bq128.bk128.causal.wgmma\$" \
  "128:1024,4096:bf16.d128.bq128.bk128.causal.wgmma\$" \
  "256:1024,4096:bf16.d256.bq128.bk80.causal.wgmma\$" > $O/ab_run.txt 2>&1
cat $O/ab.txt
cd $OUT && tar czf c8.tgz c8 && rm -rf c8
