#!/bin/bash
# Session 29 call 5: d26 / d26x (the same binary under a second name: the noise floor) / w29
# rotated, seven passes of the rows call 2 read below 1; then NVRTC cold compiles on this host,
# main's tree (.carry/m29) and this one alternating, two processes x three compiles per key.
cd "$(dirname "$0")/../../../.."
O=$OUT/c5; mkdir -p $O
timeout 300 bash bench/cuda/ab_builds.sh $O/ab 7 d26=.carry/d26/check_flash d26x=.carry/d26x/check_flash w29=.carry/w29/check_flash \
  "64:1024:bf16.d64.bq128.bk128.causal.wgmma\$" \
  "128:4096,16384:bf16.d128.bq128.bk128.wgmma\$" \
  "128:4096:bf16.d128.bq128.bk128.causal.wgmma\$" \
  "256:4096:bf16.d256.bq128.bk80.wgmma\$" \
  "256:4096:bf16.d256.bq128.bk80.causal.wgmma\$" > $O/ab_run.txt 2>&1
echo "ab rc=$?"; sed -n '/every variant/,$p' $O/ab/ab.txt
{ lscpu | grep -E "Model name|^CPU\(s\)"
for flags in "--causal" "--causal --segments" "--causal --bias" "--d 64 --causal"; do
  for p in 1 2; do
    (cd .carry/m29 && timeout 30 python3 bench/cuda/nvrtc_phases.py --d 128 $flags --runs 3 | tail -1 | sed 's/^/main /')
    timeout 30 python3 bench/cuda/nvrtc_phases.py --d 128 $flags --runs 3 | tail -1 | sed 's/^/w29  /'
  done
done; } > $O/nvrtc.txt 2>&1
cat $O/nvrtc.txt
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
