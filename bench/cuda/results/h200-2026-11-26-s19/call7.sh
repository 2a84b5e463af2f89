#!/bin/bash
# Session 19 call 7: v69 (experiment, -DEJK_SM90_S0_AHEAD): persistent record kernels issue
# each item's S(0) before the last P V of the item before it is waited, so that item's
# epilogue runs beside it (dummy S(0) past the last item). v69's full check, then v69 against
# v68 (main's kernels) in three passes on the default keys.
cd "$(dirname "$0")/../../../.."
O=$OUT/c7; mkdir -p $O
EJK_PREBUILT=.carry/v69 OUT=$O/check timeout 300 bash bench/cuda/build_and_check.sh check > $O/check.txt 2>&1
echo "check rc=$?"; grep -h "passed\|SUMMARY\|FAIL" $O/check/*.txt | head -20; grep -v PASS $O/check/runtime_smoke.txt | head -3
V64='bf16.d64.bq192.bk128.wgmma$,bf16.d64.bq128.bk128.causal.wgmma$,bf16.d64.bq192.bk128.causal.wgmma$,bf16.d64.bq128.bk128.wgmma$'
V128='bf16.d128.bq128.bk128.wgmma$,bf16.d128.bq128.bk128.causal.wgmma$,bf16.d128.bq128.bk192.causal.wgmma$'
timeout 250 bash bench/cuda/ab_builds.sh $O/ab 3 v68=.carry/v68/check_flash v69=.carry/v69/check_flash \
  "64:1024,2048,4096,16384:$V64" "128:1024,4096,16384:$V128" > $O/ab.txt 2>&1
grep -A40 "every variant" $O/ab.txt
cd $OUT && tar czf c7.tgz c7 && rm -rf c7
