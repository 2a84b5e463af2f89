#!/bin/bash
# Session 12 call 2: which rows b_st (the O store from the shuffled warpgroup index; fails the
# check on grids of three, call 1) gets wrong (check_flash now prints the worst rows of a failed
# case), then racecheck and synccheck of variant 22 on b_st and on main (v44).
cd "$(dirname "$0")/../../../.."
O=$OUT/c2; mkdir -p $O
bin=.carry/b_st2/check_flash
for s in 7062 234533 7784 269226 209242; do
  echo "== L2 seed $s"; EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 timeout 60 $bin check $s 12 12 | grep -v '^PASS'
done 2>&1 | tee $O/rows.txt
for X in b_st2 v44; do
  for tool in racecheck synccheck; do
    echo "== $X $tool"
    EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 timeout 100 compute-sanitizer --tool $tool --print-limit 10 .carry/$X/check_flash check 7062 1 22 2>&1 | grep -v '^PASS' | tail -25
  done
done 2>&1 | tee $O/sanitizers.txt
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
