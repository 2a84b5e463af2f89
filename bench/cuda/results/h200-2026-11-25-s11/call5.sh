#!/bin/bash
# Session 11 call 5: the shuffled warpgroup index for Q's descriptors only (sQ_wg): the kernels
# with Q in registers are instruction-identical to main again (call 4's failing kernel among
# them); the kernels with Q in shared memory lose the R2URs in their wgmma sequences.
# .carry/v44 = build_prebuilt.sh on it; .carry/v40 = main. Checks (persistent grids of three
# blocks on many seeds, check-bench too), sanitizers, A/B of the changed defaults, paired grid.
cd "$(dirname "$0")/../../../.."
A=.carry/v40/check_flash; B=.carry/v44/check_flash; O=$OUT/c5; mkdir -p $O
{ $B check 20261121 | tail -1
  for i in 1 2 3 4 5 6; do s=$RANDOM$i
    EJK_PERSISTENT_GRID=3 $B check $s | grep -v '^PASS'
    EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 $B check $s 12 12 | grep -v '^PASS'; done
  EJK_PERSISTENT_GRID=3 $B check-bench $RANDOM | grep -v '^PASS'
  $B check-bench $RANDOM | tail -1
  for i in 15 20 21; do timeout 100 compute-sanitizer --tool racecheck $B check 9 1 $i 2>&1 | tail -1; done
  timeout 120 compute-sanitizer --tool memcheck $B check 9 2 19 2>&1 | tail -1; } 2>&1 | tee $O/check.txt
V64='bf16.d64.bq192.bk128.wgmma$,bf16.d64.bq192.bk128.causal.wgmma$'
V128='bf16.d128.bq128.bk192.causal.wgmma$'
V256='bf16.d256.bq128.bk80.wgmma$,bf16.d256.bq128.bk80.causal.wgmma$'
S=1024,2048,4096,8192,16384
bash bench/cuda/ab_builds.sh $O 3 v40=$A v44=$B 64:$S:$V64 256:$S:$V256 128:4096,8192,16384:$V128
python3 bench/cuda/paired.py $B $O/paired --passes 2 2>&1 | tee $O/paired.txt
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
