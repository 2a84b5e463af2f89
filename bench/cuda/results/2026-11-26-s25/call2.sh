#!/bin/bash
# Session 25 call 2: b25 lost 11.6% on one bias row of call 1 (d64 192x128 causal 16k; the
# other 17 rows gained 3-17%). b25e = b25 with an evict-first L2 policy on the bias TMA loads
# (b25e-bias-evict-first.patch). check on b25e; A/B n24 (main's kernels) / b25 / b25e on the
# bias rows, three passes; ncu (DRAM and L2) on the d64 192x128 causal 16k bias launch of each.
cd "$(dirname "$0")/../../../.."
O=$OUT/c2; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
cat $O/gpu.txt
t0=$(date +%s)
timeout 120 .carry/b25e/check_flash check 20261121 > $O/check_b25e.txt 2>&1; echo "check b25e rc=$? $(tail -1 $O/check_b25e.txt)"
EJK_BENCH_GRID=0 EJK_BENCH_BIAS=1 timeout 200 bash bench/cuda/ab_builds.sh $O/ab_bias 3 \
  main=.carry/n24/check_flash b25=.carry/b25/check_flash b25e=.carry/b25e/check_flash \
  "64:1024,4096,16384:bias" "128:1024,4096,16384:bias" > $O/ab_bias.txt 2>&1
echo "ab bias rc=$? ($(( $(date +%s) - t0 )) s)"; tail -19 $O/ab_bias.txt
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
for b in n24 b25 b25e; do
  for v in bf16.d64.bq192.bk128.causal.bias.wgmma bf16.d64.bq128.bk128.causal.bias.wgmma; do
    EJK_BENCH_GRID=0 EJK_BENCH_BIAS=1 EJK_BENCH_D=64 EJK_BENCH_S=16384 EJK_BENCH_CAUSAL=1 \
      EJK_BENCH_VARIANTS="$v\$" timeout 100 ncu --metrics $M -k regex:flash --launch-skip 2 --launch-count 1 \
      .carry/$b/check_flash bench > $O/ncu_${b}_$v.txt 2>&1
    echo "== $b $v rc=$?"; grep -E "duration|dram__|lts__|gmma" $O/ncu_${b}_$v.txt
  done
done
echo "all done ($(( $(date +%s) - t0 )) s)"
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
