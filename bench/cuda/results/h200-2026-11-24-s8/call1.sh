#!/bin/bash
# Session 8 call 1: v25 (S = Q K^T with Q's fragments in registers where they fit) built here by
# .carry/build.sh .carry/v25 and carried. Correctness first (a failed check stops the call),
# then the A/B against the .qsmem twins in the same binary, three passes, then the sanitizers.
cd "$(dirname "$0")/../../../.."
B=.carry/v25/check_flash; O=$OUT/c1; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv,noheader
ok=1
timeout 120 $B check 20261121 > $O/check.txt || ok=0; tail -1 $O/check.txt; grep -v '^PASS' $O/check.txt | head
EJK_PERSISTENT_GRID=3 timeout 180 $B check $RANDOM > $O/check_random.txt || ok=0; tail -1 $O/check_random.txt; grep -v '^PASS' $O/check_random.txt | head
EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 timeout 120 $B check $RANDOM 12 12 > $O/check_l2.txt || ok=0; tail -1 $O/check_l2.txt
EJK_PERSISTENT_GRID=3 timeout 200 $B check-bench $RANDOM > $O/check_bench.txt || ok=0; tail -1 $O/check_bench.txt; grep -v '^PASS' $O/check_bench.txt | head
[[ $ok == 1 ]] || { echo "CHECK FAILED: not timing"; exit 1; }
for pass in 1 2 3; do
  EJK_BENCH_D=64 EJK_BENCH_VARIANTS=d64.bq128.bk128 timeout 100 $B bench > $O/ab64_$pass.jsonl
  EJK_BENCH_D=128 EJK_BENCH_VARIANTS=d128.bq128.bk128.wgmma,d128.bq128.bk128.causal.wgmma,d128.bq128.bk144 timeout 120 $B bench > $O/ab128_$pass.jsonl
done
python3 bench/cuda/ab_twins.py .qsmem $O/ab64_*.jsonl $O/ab128_*.jsonl | tee $O/ab.txt
# sanitizers: the first names of the check list run one block per item (d128 bk128, d128 every
# flag, f16 d64: Q in registers), 22-23 persistent; racecheck on a one-consumer Q-in-registers
# variant and the persistent causal ping-pong
for v in "3 12" "2 22"; do
  EJK_PERSISTENT_GRID=5 timeout 100 compute-sanitizer --tool memcheck --print-limit 5 $B check 8 $v | tail -2
done
for v in "2 15" "1 22"; do
  EJK_PERSISTENT_GRID=5 timeout 100 compute-sanitizer --tool racecheck --print-limit 5 $B check 9 $v | tail -2
done
awk '{print $2}' $O/check.txt | uniq | nl -v0 | sed -n '13,17p;23,24p'  # the sanitized indices
