#!/bin/bash
# Session 16 call 1 (session 15 call7.sh, run): v58 (the short
# head group of the unpadded causal orders first: v58_short_group_first.patch on main, built
# into .carry/v58 by bench/cuda/build_prebuilt.sh) against main (built into .carry/main). The
# issue's grid divides into whole groups, so the uneven case comes from EJK_BENCH_L2 = 24 MiB (d256 causal
# 1k: 128 pairs in groups of 24 and one of 8; sched_sim-style arithmetic 1.098 -> 1.045 of the
# ideal at 1k, 1.136 -> 1.015 at 2k, 1.150 -> 1.029 at 4k); the default budget as the control.
# Then the checks on v58.
cd "$(dirname "$0")/../../../.."
O=$OUT/c1; mkdir -p $O
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
# Every causal variant of main's bench list at the rows below the goals (head_dim 64 2k, 4k,
# 16k: x FA2; head_dim 256 1k: x cuDNN; two passes): does a tile other than the defaults' pay
# since the loop changed?
for pass in 1 2; do
  for ds in 64:2048 64:4096 64:16384 256:1024; do
    EJK_BENCH_D=${ds%:*} EJK_BENCH_S=${ds#*:} EJK_BENCH_CAUSAL=1 timeout 120 .carry/main/check_flash bench \
      | sed "s/^{/{\"pass\": $pass, /" >> $O/d64sweep.jsonl
  done
done
python3 - $O/d64sweep.jsonl <<'PY2' | tee $O/d64sweep.txt
import json, sys, statistics as st
by = {}
for l in open(sys.argv[1]):
    if l.startswith("{"):
        r = json.loads(l); by.setdefault((r["d"], r["s"], r["variant"]), []).append(r["tflops"])
for (d, s, v), t in sorted(by.items()):
    print(d, s, f"{v:48s} {st.median(t):6.1f} ({min(t):.0f}-{max(t):.0f})")
PY2
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
