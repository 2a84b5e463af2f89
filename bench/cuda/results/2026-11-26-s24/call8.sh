#!/bin/bash
# Session 24 call 8: n24 = logits that are not folded (bias, softcap) leave logits_to_log2 in
# natural units and the softmax takes log2(e) into its exponent's FFMA (one FMUL less per score;
# call 6/7: the bias kernel executes 2.04x the plain one's instructions and its softmax, not the
# tensor pipe, paces the tile). check + check_random + check-bench (grids of 3), memcheck 12-14,
# racecheck 13 and 19; A/B against m24 (6eaf13b), three passes: bias rows, the GQA 32:8 window +
# softcap rows, and plain controls.
cd "$(dirname "$0")/../../../.."
O=$OUT/c8; mkdir -p $O
B=.carry/n24/check_flash
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
ok=1
timeout 120 $B check 20261121 > $O/check.txt 2>&1 || ok=0
EJK_PERSISTENT_GRID=3 timeout 150 $B check $RANDOM > $O/check_random.txt 2>&1 || ok=0
EJK_PERSISTENT_GRID=3 timeout 200 $B check-bench $RANDOM > $O/check_bench.txt 2>&1 || ok=0
for f in check check_random check_bench; do echo "$f: $(grep -c ^PASS $O/$f.txt) PASS; $(grep -v ^PASS $O/$f.txt | tail -3)"; done
echo "checks ok=$ok ($(( $(date +%s) - t0 )) s)"
[[ $ok == 1 ]] || { cd $OUT && tar czf c8.tgz c8; exit 1; }
EJK_PERSISTENT_GRID=5 timeout 100 compute-sanitizer --tool memcheck --print-limit 5 $B check 8 3 12 2>&1 | tail -2
for v in "1 13" "1 19"; do
  EJK_PERSISTENT_GRID=5 timeout 100 compute-sanitizer --tool racecheck --print-limit 5 $B check 9 $v 2>&1 | tail -2
done
echo "sanitizers ($(( $(date +%s) - t0 )) s)"
EJK_BENCH_GRID=0 EJK_BENCH_BIAS=1 timeout 150 bash bench/cuda/ab_builds.sh $O/ab_bias 3 \
  main=.carry/m24/check_flash n24=$B "64:1024,4096,16384:bias" "128:1024,4096,16384:bias" > $O/ab_bias.txt 2>&1
echo "ab bias rc=$? ($(( $(date +%s) - t0 )) s)"; tail -13 $O/ab_bias.txt
EJK_BENCH_GRID=0 EJK_BENCH_WINDOW=1 timeout 100 bash bench/cuda/ab_builds.sh $O/ab_window 3 \
  main=.carry/m24/check_flash n24=$B "64:4096,8192,16384:" > $O/ab_window.txt 2>&1
echo "ab window rc=$? ($(( $(date +%s) - t0 )) s)"; tail -8 $O/ab_window.txt
timeout 80 bash bench/cuda/ab_builds.sh $O/ab_plain 3 main=.carry/m24/check_flash n24=$B \
  "64:1024:bf16.d64.bq128.bk128.causal.wgmma$" "128:4096:bf16.d128.bq128.bk128.wgmma$" > $O/ab_plain.txt 2>&1
echo "ab plain rc=$? ($(( $(date +%s) - t0 )) s)"; tail -4 $O/ab_plain.txt
echo "all done ($(( $(date +%s) - t0 )) s)"
cd $OUT && tar czf c8.tgz c8 && rm -rf c8
