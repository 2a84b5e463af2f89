#!/bin/bash
# Session 9 call 3: v27 (the producer writes each work item's record into shared memory; the
# consumers read it once the item's Q phase completes instead of decoding the item themselves).
# .carry/v28 = bench/cuda/build_prebuilt.sh on v27; .carry/v26 = session 8's final binary (the
# same kernels as main before v27). Correctness first, then sanitizers on the new hand-off, then
# both binaries on the grid's rows up to 4k, alternating, three passes.
cd "$(dirname "$0")/../../../.."
N=.carry/v28/check_flash; A=.carry/v26/check_flash; O=$OUT/c3; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader
ok=1
timeout 150 $N check 20261121 > $O/check.txt || ok=0; tail -1 $O/check.txt; grep -v '^PASS' $O/check.txt | head
EJK_PERSISTENT_GRID=3 timeout 200 $N check $RANDOM > $O/check_random.txt || ok=0; tail -1 $O/check_random.txt; grep -v '^PASS' $O/check_random.txt | head
EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 timeout 120 $N check $RANDOM 12 12 > $O/check_l2.txt || ok=0; tail -1 $O/check_l2.txt
EJK_PERSISTENT_GRID=3 timeout 200 $N check-bench $RANDOM > $O/check_bench.txt || ok=0; tail -1 $O/check_bench.txt; grep -v '^PASS' $O/check_bench.txt | head
[[ $ok == 1 ]] || { echo "CHECK FAILED: not timing"; exit 1; }
# memcheck: per item (12-13: d128, every flag), persistent (22-23); racecheck: per item with one
# consumer (16), persistent causal (22), persistent every flag d256 (23)
EJK_PERSISTENT_GRID=5 timeout 100 compute-sanitizer --tool memcheck --print-limit 5 $N check 8 2 12 | tail -2
EJK_PERSISTENT_GRID=5 timeout 100 compute-sanitizer --tool memcheck --print-limit 5 $N check 8 2 22 | tail -2
for i in 16 22 23; do
  EJK_PERSISTENT_GRID=5 timeout 100 compute-sanitizer --tool racecheck --print-limit 5 $N check 9 1 $i | tail -2
done
awk '{print $2}' $O/check.txt | uniq | nl -v0 | sed -n '13,14p;17p;23,24p'  # the sanitized indices
export EJK_BENCH_VARIANTS=d64.bq128.bk128.causal.wgmma,d64.bq192.bk128.wgmma,d64.bq192.bk128.causal.wgmma,d128.bq128.bk128.wgmma,d128.bq128.bk128.causal.wgmma,d256.bq128.bk80.wgmma,d256.bq128.bk80.causal.wgmma
for pass in 1 2 3; do
  for S in 1024 2048 4096; do
    EJK_BENCH_S=$S timeout 100 $A bench >> $O/old_$pass.jsonl
    EJK_BENCH_S=$S timeout 100 $N bench >> $O/new_$pass.jsonl
  done
done 2>&1 | tail -3
# per-variant medians of the three passes, new / old (this inline code's output format
# differed; the numbers are the same: bench/cuda/compare_runs.py reproduces call 5's ab.txt)
python3 bench/cuda/compare_runs.py old=$(ls $O/old_*.jsonl | paste -sd,) new=$(ls $O/new_*.jsonl | paste -sd,) | tee $O/ab.txt
