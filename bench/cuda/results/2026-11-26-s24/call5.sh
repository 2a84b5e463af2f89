#!/bin/bash
# Session 24 call 5: where the staged bias kernel's time goes. ncu (speed of light, memory
# workload, warp states, scheduler) on one launch each of d128 128x128 non-causal at 16k, the
# plain key and the bias key (m24 = 6eaf13b's kernels), and of the d64 192x128 pair.
cd "$(dirname "$0")/../../../.."
O=$OUT/c5; mkdir -p $O
B=.carry/m24/check_flash
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy"
prof() {  # name d variant bias
  local grid=1 extra=""
  [[ $4 == 1 ]] && grid=0
  EJK_BENCH_GRID=$grid EJK_BENCH_BIAS=$4 EJK_BENCH_D=$2 EJK_BENCH_S=16384 EJK_BENCH_CAUSAL=0 \
    EJK_BENCH_VARIANTS="$3\$" timeout 150 ncu $S -k regex:flash --launch-skip 2 --launch-count 1 \
    $B bench > $O/ncu_$1.txt 2>&1
  echo "$1 rc=$? ($(( $(date +%s) - t0 )) s)"
}
prof d128_plain 128 bf16.d128.bq128.bk128.wgmma 0
prof d128_bias 128 bf16.d128.bq128.bk128.bias.wgmma 1
prof d64_plain 64 bf16.d64.bq192.bk128.wgmma 0
prof d64_bias 64 bf16.d64.bq192.bk128.bias.wgmma 1
for f in $O/ncu_*.txt; do
  echo "== $f"
  grep -E "Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Compute \(SM\) Throughput|Issued Warp|No Eligible|Active Warps Per Scheduler|Eligible Warps|Warp Cycles Per Issued|Shared Memory|Bank Conflicts|stall" $f | head -30
done
echo "all done ($(( $(date +%s) - t0 )) s)"
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
