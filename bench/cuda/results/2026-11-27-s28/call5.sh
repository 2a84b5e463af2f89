#!/bin/bash
# Session 28 call 5: what the causal diagonal's mask costs where it is now (the item's last
# tile, ascending keys). Builds: d26 = main, m0 = main with no mask on an item's last tile
# (wrong results: a timing probe only; `t + 1 < tiles_w &&` before tile_needs_mask).
# Three passes, rotated.
cd "$(dirname "$0")/../../../.."
O=$OUT/c5; mkdir -p $O
bash bench/cuda/ab_builds.sh $O 3 d26=.carry/d26/check_flash m0=.carry/m0/check_flash \
  "64:1024,2048:bf16.d64.bq128.bk128.causal.wgmma\$" \
  "128:1024:bf16.d128.bq128.bk128.causal.wgmma\$" > $O/ab_run.txt 2>&1
cat $O/ab.txt
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
