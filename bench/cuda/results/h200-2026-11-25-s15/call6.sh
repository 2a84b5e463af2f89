#!/bin/bash
# Session 15 call 6: v57 (one block per item, causal: items in L2-sized head groups heaviest
# first, as the drawing persistent kernels take them, instead of each pair's q blocks in turn;
# bench/cuda/sched_sim-style arithmetic: d256 causal 1k-8k 4-11% from the tail) against v55b
# (main), with the default 8 MiB groups and with 16 MiB (EJK_BENCH_L2). Two passes, the three
# sides in rotated order, one process per side and shape; then the checks on v57.
cd "$(dirname "$0")/../../../.."
O=$OUT/c6; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
t0=$(date +%s)
run() {  # side binary l2 d s variant
  EJK_BENCH_L2=$3 EJK_BENCH_D=$4 EJK_BENCH_S=$5 EJK_BENCH_CAUSAL=1 EJK_BENCH_VARIANTS="$6" timeout 60 $2 bench \
    | sed "s/^{/{\"side\": \"$1\", /" >> $O/v57.jsonl
}
sides=("main .carry/v55b/check_flash 0" "v57 .carry/v57/check_flash 0" "v57_16M .carry/v57/check_flash 16777216")
for pass in 1 2; do
  for k in 0 1 2; do
    read -r name bin l2 <<< "${sides[$(( (k + pass) % 3 ))]}"
    for s in 1024 2048 4096 8192 16384; do run $name $bin $l2 256 $s 'bf16.d256.bq128.bk80.causal.wgmma$'; done
    for s in 8192 16384; do run $name $bin $l2 128 $s 'bf16.d128.bq128.bk192.causal.wgmma$'; done
  done
done
python3 - $O/v57.jsonl <<'PY' | tee $O/v57.txt
import json, sys, statistics as st
by = {}
for l in open(sys.argv[1]):
    if l.startswith("{"):
        r = json.loads(l); by.setdefault((r["d"], r["s"]), {}).setdefault(r["side"], []).append(r["tflops"])
for (d, s), sides in sorted(by.items()):
    base = st.median(sides["main"])
    print(f"d{d} {s:6} " + "  ".join(f"{k} {st.median(v):6.1f} ({min(v):.0f}-{max(v):.0f}) x{st.median(v) / base:.3f}"
                                    for k, v in sides.items()))
PY
echo "ab: $(( $(date +%s) - t0 )) s" | tee $O/times.txt
B=.carry/v57/check_flash
{ timeout 90 $B check 20261128 | tail -1
  EJK_PERSISTENT_GRID=3 timeout 90 $B check $RANDOM | tail -1
  EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 timeout 50 $B check $RANDOM 12 12 | tail -1
  EJK_PERSISTENT_GRID=3 timeout 90 $B check-bench $RANDOM | tail -1; } 2>&1 | tee $O/check.txt
echo "total: $(( $(date +%s) - t0 )) s" | tee -a $O/times.txt
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
