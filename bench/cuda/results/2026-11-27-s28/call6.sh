#!/bin/bash
# Session 28 call 6: the causal diagonal second to last (key tiles 0 .. T-3, T-1, T-2): its
# masked softmax then overlaps the loop's GEMMs instead of ending the item, which then ends on
# an unmasked tile. Builds: d26 = main, sw = desc-diag's order machinery with that order
# (sm90_key_tile; no half-width S). Three passes, rotated.
cd "$(dirname "$0")/../../../.."
O=$OUT/c6; mkdir -p $O
bash bench/cuda/ab_builds.sh $O 3 d26=.carry/d26/check_flash sw=.carry/sw/check_flash \
  "64:1024,2048,4096:bf16.d64.bq128.bk128.causal.wgmma\$" \
  "128:1024,4096:bf16.d128.bq128.bk128.causal.wgmma\$" \
  "256:1024:bf16.d256.bq128.bk80.causal.wgmma\$" > $O/ab_run.txt 2>&1
cat $O/ab.txt
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
