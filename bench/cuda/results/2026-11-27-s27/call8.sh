#!/bin/bash
# Session 27 call 8: ptxas -O1 against the default -O3, on the timed kernels. -O1 cut a JIT
# compile's instructions by 6.8% here (callgrind, d128 causal bias: 5.805 -> 5.413 G) with no
# spill and no C75xx; before NVRTC could use it, its kernels must run as fast. Builds:
# d26 = main's kernels at -O3 (24ffb9f), o1 = the same kernels with `-Xptxas -O1`
# (`bash bench/cuda/build_prebuilt.sh .carry/o1 -Xptxas -O1`). Three passes, builds rotated.
cd "$(dirname "$0")/../../../.."
O=$OUT/c8; mkdir -p $O
bash bench/cuda/ab_builds.sh $O 3 d26=.carry/d26/check_flash o1=.carry/o1/check_flash \
  "64:1024,4096,16384:bf16.d64.bq128.bk128.causal.wgmma\$,bf16.d64.bq192.bk128.wgmma\$" \
  "128:1024,4096,16384:bf16.d128.bq128.bk128.wgmma\$,bf16.d128.bq128.bk128.causal.wgmma\$" \
  "256:4096:bf16.d256.bq128.bk80.causal.wgmma\$" > $O/ab_run.txt 2>&1
cat $O/ab.txt
cd $OUT && tar czf c8.tgz c8 && rm -rf c8
