#!/bin/bash
# Session 20 call 3: v72 (P V at N = head_dim instead of the padded tile's: d96 O += P V as
# m64n96 over 1.5 swizzle atoms of V, O's accumulators 48 instead of 64). Full check first
# (MN-major B of an N that is no multiple of 64 is what it tests), sanitizers on the padded
# variants, then v71 against v72 on the d96 and d160 defaults, three passes, builds rotated.
cd "$(dirname "$0")/../../../.."
O=$OUT/c3; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
EJK_PREBUILT=.carry/v72 OUT=$O/check timeout 330 bash bench/cuda/build_and_check.sh check > $O/check.txt 2>&1
rc=$?; echo "check rc=$rc ($(( $(date +%s) - t0 )) s)"; grep -v "^PASS\|regs" $O/check.txt | tail -22
if [[ $rc == 0 ]]; then
  B=.carry/v72/check_flash
  EJK_PERSISTENT_GRID=5 timeout 90 compute-sanitizer --tool memcheck --print-limit 5 $B check 8 8 35 2>&1 | tail -2 | tee $O/sanitizers_padded.txt
  EJK_PERSISTENT_GRID=5 timeout 90 compute-sanitizer --tool racecheck --print-limit 5 $B check 9 8 35 2>&1 | tail -2 | tee -a $O/sanitizers_padded.txt
  V96='bf16.d96.bq128.bk128.wgmma$,bf16.d96.bq128.bk128.causal.wgmma$'
  V160='bf16.d160.bq128.bk64.wgmma$,bf16.d160.bq128.bk64.causal.wgmma$'
  timeout 240 bash bench/cuda/ab_builds.sh $O/ab 3 v71=.carry/v71/check_flash v72=.carry/v72/check_flash \
    "96:1024,4096,16384:$V96" "160:1024,4096,16384:$V160" > $O/ab.txt 2>&1
  tail -16 $O/ab.txt
fi
echo "done ($(( $(date +%s) - t0 )) s)"
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
