#!/bin/bash
# Session 22 call 4: v78 = v77 + mask_segments apart from the position mask, with an early exit
# for warps whose rows and tile lie in one segment (tile_needs_mask no longer forces the
# position mask on every tile of a segments kernel); check_flash has a long-segments problem
# (runs up to 300, q ids = kv ids) that takes the exit. Full check, then the segments rows A/B
# against .carry/v78o (main's kernels, the same bench), one segment per sequence and eight,
# three passes each; the plain keys of the same tiles once for scale.
cd "$(dirname "$0")/../../../.."
O=$OUT/c4; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
EJK_PREBUILT=.carry/v78 OUT=$O/check timeout 330 bash bench/cuda/build_and_check.sh check > $O/check.txt 2>&1
echo "check rc=$? ($(( $(date +%s) - t0 )) s)"; grep -v "^PASS\|regs" $O/check.txt | tail -16
for n in 1 8; do
  EJK_BENCH_GRID=0 EJK_BENCH_SEGMENTS=$n timeout 120 bash bench/cuda/ab_builds.sh $O/ab$n 3 \
    main=.carry/v78o/check_flash v78=.carry/v78/check_flash \
    "64:1024,4096,16384:seg" "128:1024,4096,16384:seg" > $O/ab$n.txt 2>&1
  echo "ab segments=$n rc=$? ($(( $(date +%s) - t0 )) s)"; tail -13 $O/ab$n.txt
done
for d in 64 128; do
  for s in 1024 4096 16384; do
    EJK_BENCH_D=$d EJK_BENCH_S=$s EJK_BENCH_VARIANTS='d64.bq192.bk128.wgmma$,d64.bq192.bk128.causal.wgmma$,d128.bq128.bk128.wgmma$,d128.bq128.bk128.causal.wgmma$' \
      timeout 60 .carry/v78/check_flash bench
  done
done > $O/plain.jsonl 2>&1
python3 -c "
import json,sys
for l in open('$O/plain.jsonl'):
    if l.startswith('{'): r=json.loads(l); print(r['d'], r['s'], r['causal'], r['variant'], r['tflops'])
"
echo "all done ($(( $(date +%s) - t0 )) s)"
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
