#!/bin/bash
# Session 11 call 4: call 3's one failure (L2-group check, seed 7062: 71/72) replayed with the
# full output on v43 and on main (v40), more random seeds of both persistent-grid checks on v43,
# then the issue's grid paired with the peers on v43 (two passes).
cd "$(dirname "$0")/../../../.."
A=.carry/v40/check_flash; B=.carry/v43/check_flash; O=$OUT/c4; mkdir -p $O
for X in A B; do
  bin=${!X}
  echo "== $X seed 7062"; EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 $bin check 7062 12 12 | grep -v '^PASS'
done 2>&1 | tee $O/replay.txt
for i in 1 2 3 4 5 6; do
  s=$RANDOM$i
  EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 $B check $s 12 12 | grep -v '^PASS'
  EJK_PERSISTENT_GRID=3 $B check $s | grep -v '^PASS'
done 2>&1 | tee $O/seeds.txt
python3 bench/cuda/paired.py $B $O/paired --passes 2 2>&1 | tee $O/paired.txt
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
