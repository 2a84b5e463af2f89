#!/bin/bash
# Session 28 call 4: is the diagonal's mask, now on the item's first tile (outside the overlap
# of the loop), what the descending order costs? Builds: d26 = main, h27 = desc-diag (d83cbf8),
# h27x = h27 with no mask on an item's first tile (wrong results: a timing probe only;
# `t > 0 &&` before tile_needs_mask in to_log2). Three passes, rotated.
cd "$(dirname "$0")/../../../.."
O=$OUT/c4; mkdir -p $O
bash bench/cuda/ab_builds.sh $O 3 d26=.carry/d26/check_flash h27=.carry/h27/check_flash h27x=.carry/h27x/check_flash \
  "64:1024,2048:bf16.d64.bq128.bk128.causal.wgmma\$" \
  "128:1024:bf16.d128.bq128.bk128.causal.wgmma\$" > $O/ab_run.txt 2>&1
cat $O/ab.txt
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
