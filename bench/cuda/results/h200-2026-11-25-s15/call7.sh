#!/bin/bash
# Session 15 call 7 (prepared, NOT RUN: the session's device time was spent): v58 (the short
# head group of the unpadded causal orders first: v58_short_group_first.patch on main, built
# into .carry/v58 by bench/cuda/build_prebuilt.sh) against main (built into .carry/main). The
# issue's grid divides into whole groups, so the uneven case comes from EJK_BENCH_L2 = 24 MiB (d256 causal
# 1k: 128 pairs in groups of 24 and one of 8; sched_sim-style arithmetic 1.098 -> 1.045 of the
# ideal at 1k, 1.136 -> 1.015 at 2k, 1.150 -> 1.029 at 4k); the default budget as the control.
# Then the checks on v58.
cd "$(dirname "$0")/../../../.."
O=$OUT/c7; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
run() {  # side binary l2 d s variant
  EJK_BENCH_L2=$3 EJK_BENCH_D=$4 EJK_BENCH_S=$5 EJK_BENCH_CAUSAL=1 EJK_BENCH_VARIANTS="$6" timeout 60 $2 bench \
    | sed "s/^{/{\"side\": \"$1\", /" >> $O/v58.jsonl
}
for pass in 1 2 3; do
  for side in main v58; do
    [[ $pass == 2 ]] && side=$([[ $side == main ]] && echo v58 || echo main)
    bin=.carry/$([[ $side == main ]] && echo main || echo v58)/check_flash
    for l2 in 25165824 0; do
      for s in 1024 2048 4096 8192; do run $side.$l2 $bin $l2 256 $s 'bf16.d256.bq128.bk80.causal.wgmma$'; done
      run $side.$l2 $bin $l2 64 2048 'bf16.d64.bq128.bk128.causal.wgmma$'
    done
  done
done
python3 - $O/v58.jsonl <<'PY' | tee $O/v58.txt
import json, sys, statistics as st
by = {}
for l in open(sys.argv[1]):
    if l.startswith("{"):
        r = json.loads(l); by.setdefault((r["d"], r["s"]), {}).setdefault(r["side"], []).append(r["tflops"])
for key, sides in sorted(by.items()):
    print(key, "  ".join(f"{k} {st.median(v):6.1f} ({min(v):.0f}-{max(v):.0f})" for k, v in sorted(sides.items())))
PY
B=.carry/v58/check_flash
{ timeout 90 $B check 20261129 | tail -1
  EJK_PERSISTENT_GRID=3 timeout 90 $B check $RANDOM | tail -1
  EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 timeout 50 $B check $RANDOM 12 12 | tail -1
  # three kv heads per group: pair counts that are no multiple of it leave the short group
  EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=3 timeout 50 $B check $RANDOM 12 12 | tail -1
  EJK_CHECK_L2_KV_HEADS=3 timeout 50 $B check $RANDOM 12 12 | tail -1
  EJK_PERSISTENT_GRID=3 timeout 90 $B check-bench $RANDOM | tail -1; } 2>&1 | tee $O/check.txt
cd $OUT && tar czf c7.tgz c7 && rm -rf c7
