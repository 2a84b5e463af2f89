#!/bin/bash
# Session 9 call 5: v27c = v27b (the producer's item record, announced on a barrier of its own
# ahead of the item's Q) for persistent blocks of one or two consumer warpgroups only; lane 0 of
# each consumer warp reads the record and shuffles it round (racecheck flagged the other lanes'
# reads against the producer's next write in call 4: their order before lane 0's release was
# not established). .carry/v30 = bench/cuda/build_prebuilt.sh on v27c; .carry/v26 = session 8's
# final binary. Checks, sanitizers (racecheck on record kernels: 12, 22, 23), then both binaries
# on the grid's rows (1k-16k), alternating, three passes.
cd "$(dirname "$0")/../../../.."
N=.carry/v30/check_flash; A=.carry/v26/check_flash; O=$OUT/c5; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader
ok=1
timeout 150 $N check 20261121 > $O/check.txt || ok=0; tail -1 $O/check.txt; grep -v '^PASS' $O/check.txt | head
EJK_PERSISTENT_GRID=3 timeout 200 $N check $RANDOM > $O/check_random.txt || ok=0; tail -1 $O/check_random.txt; grep -v '^PASS' $O/check_random.txt | head
EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 timeout 120 $N check $RANDOM 12 12 > $O/check_l2.txt || ok=0; tail -1 $O/check_l2.txt
EJK_PERSISTENT_GRID=3 timeout 200 $N check-bench $RANDOM > $O/check_bench.txt || ok=0; tail -1 $O/check_bench.txt; grep -v '^PASS' $O/check_bench.txt | head
[[ $ok == 1 ]] || { echo "CHECK FAILED: not timing"; exit 1; }
# memcheck: 12-13 (d128 128x128, every-flag d128 128x64), 22-23 (schedule forced persistent); racecheck on
# 12, 22, 23: persistent blocks of two consumers, which take their items from the record
EJK_PERSISTENT_GRID=5 timeout 100 compute-sanitizer --tool memcheck --print-limit 5 $N check 8 2 12 | tail -2
EJK_PERSISTENT_GRID=5 timeout 100 compute-sanitizer --tool memcheck --print-limit 5 $N check 8 2 22 | tail -2
for i in 12 22 23; do
  EJK_PERSISTENT_GRID=5 timeout 100 compute-sanitizer --tool racecheck --print-limit 12 $N check 9 1 $i > $O/racecheck_$i.txt 2>&1; tail -2 $O/racecheck_$i.txt
done
awk '{print $2}' $O/check.txt | uniq | nl -v0 | sed -n '13,14p;17p;23,24p'  # the sanitized indices
export EJK_BENCH_VARIANTS=d64.bq128.bk128.causal.wgmma,d64.bq192.bk128.wgmma,d64.bq192.bk128.causal.wgmma,d128.bq128.bk128.wgmma,d128.bq128.bk128.causal.wgmma,d256.bq128.bk80.wgmma,d256.bq128.bk80.causal.wgmma
for pass in 1 2 3; do
  for S in 1024 2048 4096 8192 16384; do
    EJK_BENCH_S=$S timeout 100 $A bench >> $O/old_$pass.jsonl
    EJK_BENCH_S=$S timeout 100 $N bench >> $O/new_$pass.jsonl
  done
done 2>&1 | tail -3
# per-variant medians of the three passes, new / old (this inline code's output format
# differed; the numbers are the same: bench/cuda/compare_runs.py reproduces call 5's ab.txt)
python3 bench/cuda/compare_runs.py old=$(ls $O/old_*.jsonl | paste -sd,) new=$(ls $O/new_*.jsonl | paste -sd,) | tee $O/ab.txt
cd $OUT && tar czf c5_raw.tgz c5/*.jsonl c5/racecheck_*.txt && rm c5/*.jsonl
