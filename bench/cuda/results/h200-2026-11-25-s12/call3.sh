#!/bin/bash
# Session 12 call 3: b_qrel = b_st with each consumer warp's q_empty release (Q in registers) moved
# from right after its ldmatrix loads of Q to after S(0) is done. Hypothesis (call 2's rows: only
# warp 4, the warpgroup-1 leader's warp, of back-to-back one-tile items): the release overtook
# the leader warp's ldmatrix reads, and the next item's Q landed first.
cd "$(dirname "$0")/../../../.."
O=$OUT/c3; mkdir -p $O
for X in b_qrel b_st2; do
  bin=.carry/$X/check_flash
  for s in 7062 234533 7784 269226 209242 20515 11 12; do
    echo "== $X L2 seed $s: $(EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 timeout 60 $bin check $s 12 12 | grep -v '^PASS' | tr '\n' '|')"
  done
  for s in 234533 269226; do
    echo "== $X full seed $s: $(EJK_PERSISTENT_GRID=3 timeout 90 $bin check $s | grep -v '^PASS' | tr '\n' '|')"
  done
done 2>&1 | tee $O/qrel.txt
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
