#!/bin/bash
# Session 25 call 6: call 3's `ejk run` of the GQA 32:8 window 1024 + softcap 30 row at 4k read
# 0.628 ms against session 24's 0.559 (host-timed; that host also compiled 1.5-2x slower). The
# key has no bias: its PTX is main's but for the parameter size (640 B of maps). A/B of the
# window + softcap rows and two plain controls, n24 (session 24's kernels) against b25e (this
# session's), three passes.
cd "$(dirname "$0")/../../../.."
O=$OUT/c6; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
cat $O/gpu.txt; grep -m1 "model name" /proc/cpuinfo
t0=$(date +%s)
EJK_BENCH_GRID=0 EJK_BENCH_WINDOW=1 timeout 150 bash bench/cuda/ab_builds.sh $O/ab_window 3 \
  main=.carry/n24/check_flash b25e=.carry/b25e/check_flash "64:4096,8192,16384:" > $O/ab_window.txt 2>&1
echo "ab window rc=$? ($(( $(date +%s) - t0 )) s)"; tail -8 $O/ab_window.txt
timeout 100 bash bench/cuda/ab_builds.sh $O/ab_plain 3 main=.carry/n24/check_flash b25e=.carry/b25e/check_flash \
  "64:1024:bf16.d64.bq128.bk128.causal.wgmma$" "128:4096:bf16.d128.bq128.bk128.wgmma$" > $O/ab_plain.txt 2>&1
echo "ab plain rc=$? ($(( $(date +%s) - t0 )) s)"; tail -4 $O/ab_plain.txt
echo "all done ($(( $(date +%s) - t0 )) s)"
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
