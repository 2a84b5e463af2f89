#!/bin/bash
# Session 10 call 10: checks after the review's producer helper (f669bdf; .carry/v40 =
# build_prebuilt.sh on it): the check matrix with the fixed and a random seed on persistent
# grids of 3, the L2 head groups, check-bench, and the sanitizers on record / per-item kernels.
cd "$(dirname "$0")/../../../.."
B=.carry/v40/check_flash
$B check 20261121 | tail -1
EJK_PERSISTENT_GRID=3 $B check $RANDOM | tail -1
EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 $B check $RANDOM 12 12 | tail -1
$B check-bench $RANDOM | tail -1
for i in 12 22 23; do timeout 120 compute-sanitizer --tool racecheck $B check 9 1 $i 2>&1 | tail -1; done
timeout 200 compute-sanitizer --tool memcheck $B check 9 2 12 2>&1 | tail -1
