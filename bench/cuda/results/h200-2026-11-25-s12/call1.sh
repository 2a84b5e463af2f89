#!/bin/bash
# Session 12 call 1: bisect session 11's v43 failure (persistent d128 128 x 128 causal, check
# index 22, grids of three blocks). Builds from one tree with macros (-DEJK_BIS_*):
#   b_bar   the turn barriers' ids from the shuffled warpgroup index
#   b_st    the O store's barrier id and rows from it
#   b_both  both (= v43)
#   b_bothsw  both, and __syncwarp before each warp's lane 0 arrives on an empty barrier
# v44 = main. Then racecheck and synccheck on b_both and main, variant 22 alone.
cd "$(dirname "$0")/../../../.."
O=$OUT/c1; mkdir -p $O
for X in v44 b_bar b_st b_both b_bothsw; do
  bin=.carry/$X/check_flash
  for s in 7062 209242 234533 7784 20515 269226; do
    echo "== $X L2 seed $s: $(EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 $bin check $s 12 12 | grep -v '^PASS' | tr '\n' '|')"
  done
  for s in 234533 269226; do
    echo "== $X full seed $s: $(EJK_PERSISTENT_GRID=3 $bin check $s | grep -v '^PASS' | tr '\n' '|')"
  done
done 2>&1 | tee $O/bisect.txt
for i in 1 2 3; do
  echo "== b_both repeat $i: $(EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 .carry/b_both/check_flash check 7062 12 12 | grep -v '^PASS' | tr '\n' '|')"
done 2>&1 | tee $O/repeat.txt
for X in b_both v44; do
  for tool in racecheck synccheck; do
    echo "== $X $tool"
    EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 timeout 150 compute-sanitizer --tool $tool --print-limit 10 .carry/$X/check_flash check 7062 1 22 2>&1 | grep -v '^PASS' | tail -25
  done
done 2>&1 | tee $O/sanitizers.txt
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
