#!/bin/bash
# Session 12 call 10: v47 (head_dim 256 keeps the warpgroup index from threadIdx.x except for Q's
# descriptors, as before v46: 5 R2URs inside its S + P V wgmma group instead of v46's 14)
# against v46b (main), head_dim 256 defaults, three alternating passes; the check of v47's
# head_dim 256 kernels on grids of three.
cd "$(dirname "$0")/../../../.."
O=$OUT/c10; mkdir -p $O
B=.carry/v46b/check_flash; C=.carry/v47/check_flash
V256='bf16.d256.bq128.bk80.wgmma$,bf16.d256.bq128.bk80.causal.wgmma$'
bash bench/cuda/ab_builds.sh $O 3 v46b=$B v47=$C 256:1024,2048,4096,8192,16384:$V256
{ EJK_PERSISTENT_GRID=3 $C check $RANDOM | grep -v '^PASS'
  EJK_PERSISTENT_GRID=3 $C check-bench $RANDOM | grep -v '^PASS'; } 2>&1 | tee $O/check.txt
cd $OUT && tar czf c10.tgz c10 && rm -rf c10
