#!/bin/bash
# Session 12 call 5: checks of v45b (main + the q_empty release beside the first K release, no
# C7515) and v46b (v45b + the shuffled warpgroup index for every use): fixed seed, two random
# seeds on persistent grids of three blocks (check and the L2 head-group check), check-bench on
# grids of three; racecheck of the Q-in-register persistent kernels on v45b.
cd "$(dirname "$0")/../../../.."
O=$OUT/c5; mkdir -p $O
{ for X in v45b v46b; do bin=.carry/$X/check_flash; echo "== $X"
    $bin check 20261121 | tail -1
    for i in 1 2; do s=$RANDOM$i
      EJK_PERSISTENT_GRID=3 $bin check $s | grep -v '^PASS'
      EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 $bin check $s 12 12 | grep -v '^PASS'; done
    EJK_PERSISTENT_GRID=3 $bin check-bench $RANDOM | grep -v '^PASS'
  done
  for i in 21 22; do EJK_PERSISTENT_GRID=3 timeout 100 compute-sanitizer --tool racecheck .carry/v45b/check_flash check 9 1 $i 2>&1 | tail -1; done
} 2>&1 | tee $O/check.txt
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
