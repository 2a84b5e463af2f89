#!/bin/bash
# Session 28 call 14: how busy L2 and the SM pipes are on the short head_dim 64 rows, the
# measurement per-warpgroup items (each warpgroup loading its own K and V) would need first.
# ncu (speed of light, memory workload, warp states, scheduler) on one launch each of main's
# default d64 causal 1k (128x128) and non-causal 1k (192x128) keys (.carry/d26).
cd "$(dirname "$0")/../../../.."
O=$OUT/c14; mkdir -p $O
B=.carry/d26/check_flash
t0=$(date +%s)
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis"
prof() {  # name d s causal variant
  EJK_BENCH_D=$2 EJK_BENCH_S=$3 EJK_BENCH_CAUSAL=$4 EJK_BENCH_VARIANTS="$5\$" \
    timeout 150 ncu $S -k regex:flash --launch-skip 2 --launch-count 1 $B bench > $O/ncu_$1.txt 2>&1
  echo "$1 rc=$? ($(( $(date +%s) - t0 )) s)"
}
prof d64_causal_1k 64 1024 1 bf16.d64.bq128.bk128.causal.wgmma
prof d64_1k 64 1024 0 bf16.d64.bq192.bk128.wgmma
for f in $O/ncu_*.txt; do
  echo "== $f"
  grep -E "Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Compute \(SM\) Throughput|L2 Hit|Issued Warp|No Eligible|Warp Cycles Per Issued|Executed Ipc|Issue Slots Busy|SM Busy" $f | head -24
done
cd $OUT && tar czf c14.tgz c14 && rm -rf c14
