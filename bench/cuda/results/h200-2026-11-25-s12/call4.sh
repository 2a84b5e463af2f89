#!/bin/bash
# Session 12 call 4: checks of v45 (main + the q_empty release after S(0)) and v46 (v45 + the
# shuffled warpgroup index for every use, session 11's v43), persistent grids of three blocks
# on random seeds, check-bench on grids of three, sanitizers on v45.
cd "$(dirname "$0")/../../../.."
O=$OUT/c4; mkdir -p $O
A=.carry/v45/check_flash; B=.carry/v46/check_flash
{ echo "== v45"; $A check 20261121 | tail -1
  for i in 1 2 3 4; do s=$RANDOM$i
    EJK_PERSISTENT_GRID=3 $A check $s | grep -v '^PASS'
    EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 $A check $s 12 12 | grep -v '^PASS'; done
  EJK_PERSISTENT_GRID=3 $A check-bench $RANDOM | grep -v '^PASS'
  for i in 21 22; do EJK_PERSISTENT_GRID=3 timeout 100 compute-sanitizer --tool racecheck $A check 9 1 $i 2>&1 | tail -1; done
  timeout 120 compute-sanitizer --tool memcheck $A check 9 2 19 2>&1 | tail -1
  echo "== v46"; $B check 20261121 | tail -1
  for i in 1 2 3 4; do s=$RANDOM$i
    EJK_PERSISTENT_GRID=3 $B check $s | grep -v '^PASS'
    EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 $B check $s 12 12 | grep -v '^PASS'; done
  EJK_PERSISTENT_GRID=3 $B check-bench $RANDOM | grep -v '^PASS'; } 2>&1 | tee $O/check.txt
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
