#!/bin/bash
# Session 17 call 3: v62, masked causal tiles skip the exponentials of 16-key chunks no row of
# the warp can see (live_chunks; the diagonal tile: ~44% of its ex2), against main
# (.carry/s16 = main's kernels; .carry/v62 = build_prebuilt.sh on branch wt-v62). Five passes,
# the builds' order rotated; every default causal key of the grid plus the d64 non-causal
# default as a control (same code in both builds). Then checks and racecheck on v62.
cd "$(dirname "$0")/../../../.."
O=$OUT/c3; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
t0=$(date +%s)
L=1024,2048,4096,8192,16384
bash bench/cuda/ab_builds.sh $O/ab 5 main=.carry/s16/check_flash v62=.carry/v62/check_flash \
  "64:$L:bf16.d64.bq128.bk128.causal.wgmma\$,bf16.d64.bq192.bk128.causal.wgmma\$,bf16.d64.bq192.bk128.wgmma\$" \
  "128:$L:bf16.d128.bq128.bk128.causal.wgmma\$,bf16.d128.bq128.bk192.causal.wgmma\$" \
  "256:$L:bf16.d256.bq128.bk80.causal.wgmma\$" > $O/ab.log 2>&1
echo "ab: $(( $(date +%s) - t0 )) s" | tee $O/times.txt
B=.carry/v62/check_flash
{ timeout 100 $B check 20261201 | tail -1
  EJK_PERSISTENT_GRID=3 timeout 100 $B check $RANDOM | tail -1
  EJK_PERSISTENT_GRID=3 timeout 100 $B check-bench $RANDOM | tail -1
  for v in 33 22 15; do EJK_PERSISTENT_GRID=3 timeout 100 compute-sanitizer --tool racecheck $B check 7 1 $v | tail -2; done; } 2>&1 | tee $O/check.txt
echo "total: $(( $(date +%s) - t0 )) s" | tee -a $O/times.txt
cut -c1-150 $O/ab/ab.txt | head -60
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
