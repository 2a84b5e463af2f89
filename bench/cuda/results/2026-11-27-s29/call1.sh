#!/bin/bash
# Session 29 call 1: whole-GEMM wgmma statements (w29 = this session's kernels,
# `bash bench/cuda/build_prebuilt.sh .carry/w29`) against main's (d26). SASS counts of every
# check_flash kernel, the check of w29, d26 / w29 rotated over three passes of the grid's default
# variants, then NVRTC cold compiles on this host, main's tree (.carry/m29: kernels, templates,
# nvrtc_phases.py of 198a1da) and this one alternating.
cd "$(dirname "$0")/../../../.."
R=bench/cuda/results/2026-11-27-s29
O=$OUT/c1; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt; cat $O/gpu.txt
for b in d26 w29; do timeout 60 cuobjdump -sass .carry/$b/check_flash > /tmp/$b.sass; done
python3 $R/sass_diff.py /tmp/d26.sass /tmp/w29.sass > $O/sass_diff.txt; tail -1 $O/sass_diff.txt
(time timeout 200 .carry/w29/check_flash check) > $O/check.txt 2>&1; grep "^check:" $O/check.txt; tail -3 $O/check.txt
t0=$(date +%s)
timeout 330 bash bench/cuda/ab_builds.sh $O/ab 3 d26=.carry/d26/check_flash w29=.carry/w29/check_flash \
  "64:1024,4096:bf16.d64.bq128.bk128.causal.wgmma\$" \
  "64:4096,16384:bf16.d64.bq192.bk128.causal.wgmma\$" \
  "64:1024,16384:bf16.d64.bq192.bk128.wgmma\$" \
  "128:1024,4096,16384:bf16.d128.bq128.bk128.wgmma\$" \
  "128:1024,4096:bf16.d128.bq128.bk128.causal.wgmma\$" \
  "128:16384:bf16.d128.bq128.bk192.causal.wgmma\$" \
  "256:1024,4096:bf16.d256.bq128.bk80.causal.wgmma\$" \
  "256:4096:bf16.d256.bq128.bk80.wgmma\$" > $O/ab_run.txt 2>&1
echo "ab rc=$? ($(( $(date +%s) - t0 )) s)"; cat $O/ab/ab.txt
{ lscpu | grep -E "Model name|^CPU\(s\)"
for flags in "--causal" "--causal --segments" "--causal --bias"; do
  for p in 1 2; do
    (cd .carry/m29 && timeout 30 python3 bench/cuda/nvrtc_phases.py --d 128 $flags --runs 3 | tail -1 | sed 's/^/main /')
    timeout 30 python3 bench/cuda/nvrtc_phases.py --d 128 $flags --runs 3 | tail -1 | sed 's/^/w29  /'
  done
done; } > $O/nvrtc.txt 2>&1
cat $O/nvrtc.txt
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
