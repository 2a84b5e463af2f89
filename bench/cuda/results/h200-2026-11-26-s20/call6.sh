#!/bin/bash
# Session 20 call 6: v73 (experiment, .carry/v73 built with -DEJK_SM90_WG_TILES -DEJK_SM90_DRAW3
# on b194ae3 + v70's patch + the DRAW3 switch): three causal consumers take item records and
# draw their items from the launch's counter (as two consumers do since v27 / session 14), and
# each stops at its own last key tile (v70). Full check first, then head_dim 64 causal
# 192 x 128 and 128 x 128 against v72u (main's kernels) at 1k-8k, three passes, builds rotated.
cd "$(dirname "$0")/../../../.."
O=$OUT/c6; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
EJK_PREBUILT=.carry/v73 OUT=$O/check timeout 330 bash bench/cuda/build_and_check.sh check > $O/check.txt 2>&1
rc=$?; echo "check rc=$rc ($(( $(date +%s) - t0 )) s)"; grep -v "^PASS\|regs" $O/check.txt | tail -20
if [[ $rc == 0 ]]; then
  B=.carry/v73/check_flash
  # racecheck on the three-consumer causal variants that now draw (indices 21 and 33)
  for v in "1 21" "1 33"; do
    EJK_PERSISTENT_GRID=5 timeout 90 compute-sanitizer --tool racecheck --print-limit 5 $B check 9 $v 2>&1 | tail -2
  done | tee $O/sanitizers_v73.txt
  V='bf16.d64.bq192.bk128.causal.wgmma$,bf16.d64.bq128.bk128.causal.wgmma$'
  timeout 200 bash bench/cuda/ab_builds.sh $O/ab 3 main=.carry/v72u/check_flash v73=.carry/v73/check_flash \
    "64:1024,2048,4096,8192:$V" > $O/ab.txt 2>&1
  tail -12 $O/ab.txt
fi
echo "done ($(( $(date +%s) - t0 )) s)"
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
