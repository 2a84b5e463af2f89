#!/bin/bash
# Session 28 call 1: causal items take their key tiles last first (the diagonal first), and at
# head_dim 64 128 x 128 the first warpgroup issues that diagonal tile's S at half width (its
# rows see none of the tile's second 64 keys). Builds: d26 = main (24ffb9f's kernels,
# `bash bench/cuda/build_prebuilt.sh .carry/d26`), h27 = branch desc-diag
# (`bash bench/cuda/build_prebuilt.sh .carry/h27`), h27n = the same with kHalfFirstS false (the
# order alone). The check first, then three passes with the builds rotated.
cd "$(dirname "$0")/../../../.."
O=$OUT/c1; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $O/gpu.txt
(time .carry/h27/check_flash check) > $O/check.txt 2>&1; tail -3 $O/check.txt
bash bench/cuda/ab_builds.sh $O 3 d26=.carry/d26/check_flash h27=.carry/h27/check_flash h27n=.carry/h27n/check_flash \
  "64:1024,2048,4096:bf16.d64.bq128.bk128.causal.wgmma\$" \
  "128:1024,4096:bf16.d128.bq128.bk128.causal.wgmma\$" \
  "256:1024,4096:bf16.d256.bq128.bk80.causal.wgmma\$" > $O/ab_run.txt 2>&1
cat $O/ab.txt
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
