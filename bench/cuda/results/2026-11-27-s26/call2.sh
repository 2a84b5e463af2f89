#!/bin/bash
# Session 26 call 2: s26 = split tails (the last two rounds of the plain order's persistent
# blocks cut into even shares of key tiles; the second half to finish merges). Checks: check,
# check_random and check-bench on persistent grids of 3 (items split in most problems), check
# with EJK_NO_SPLIT=1, memcheck, racecheck on split variants; then A/B, three passes, builds
# rotated: main (b26) / s26 / s26 with EJK_NO_SPLIT=1, d128 non-causal default 1k-16k, d64
# 128x128 non-causal, and a causal control.
cd "$(dirname "$0")/../../../.."
O=$OUT/c2; mkdir -p $O
B=.carry/s26/check_flash
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
cat $O/gpu.txt
printf '#!/bin/bash\nEJK_NO_SPLIT=1 exec %s "$@"\n' "$PWD/$B" > $O/nosplit.sh && chmod +x $O/nosplit.sh
t0=$(date +%s)
ok=1
timeout 120 $B check 20261121 > $O/check.txt 2>&1 || ok=0
EJK_PERSISTENT_GRID=3 timeout 150 $B check $RANDOM > $O/check_random.txt 2>&1 || ok=0
EJK_PERSISTENT_GRID=7 timeout 150 $B check $RANDOM > $O/check_random7.txt 2>&1 || ok=0
EJK_NO_SPLIT=1 EJK_PERSISTENT_GRID=3 timeout 150 $B check $RANDOM > $O/check_nosplit.txt 2>&1 || ok=0
for f in check check_random check_random7 check_nosplit; do echo "$f: $(grep -c ^PASS $O/$f.txt) PASS; $(grep -v ^PASS $O/$f.txt | tail -3)"; done
echo "checks ok=$ok ($(( $(date +%s) - t0 )) s)"
[[ $ok == 1 ]] || { grep -v ^PASS $O/check_random.txt | head -30; cd $OUT && tar czf c2.tgz c2; exit 1; }
EJK_PERSISTENT_GRID=5 timeout 100 compute-sanitizer --tool memcheck --print-limit 5 $B check 8 3 12 2>&1 | tail -2
for v in "1 12" "1 16"; do
  EJK_PERSISTENT_GRID=5 timeout 100 compute-sanitizer --tool racecheck --print-limit 5 $B check 9 $v 2>&1 | tail -2
done
echo "sanitizers ($(( $(date +%s) - t0 )) s)"
timeout 200 bash bench/cuda/ab_builds.sh $O/ab 3 main=.carry/b26/check_flash s26=$B nosplit=$O/nosplit.sh \
  '128:1024,2048,4096,8192,16384:d128.bq128.bk128.wgmma$' '64:1024,16384:d64.bq128.bk128.wgmma$' \
  '128:4096:d128.bq128.bk128.causal.wgmma$' > $O/ab.txt 2>&1
echo "ab rc=$? ($(( $(date +%s) - t0 )) s)"; tail -14 $O/ab.txt
echo "check-bench:"
EJK_PERSISTENT_GRID=3 timeout 250 stdbuf -oL $B check-bench $RANDOM > $O/check_bench.txt 2>&1
echo "check-bench rc=$? $(grep -c ^PASS $O/check_bench.txt) PASS; $(grep -v ^PASS $O/check_bench.txt | tail -3)"
echo "all done ($(( $(date +%s) - t0 )) s)"
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
