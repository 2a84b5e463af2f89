#!/bin/bash
# Session 26 call 4: (1) the drawn order's L2 group budget swept again at d64 causal 1k / 2k on
# main's default keys (EJK_BENCH_L2, one binary, three runs; the 8 MiB default was set in
# session 14 on older kernels); (2) the rows nearest their goals paired with PyTorch SDPA on main
# (b26): d64 causal 1k / 2k (five passes), d64 non-causal 1k, d128 non-causal 16k, d256 causal 1k
# (three passes).
cd "$(dirname "$0")/../../../.."
O=$OUT/c4; mkdir -p $O
B=.carry/b26/check_flash
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
cat $O/gpu.txt
t0=$(date +%s)
M=1048576
for run in 1 2 3; do for s in 1024 2048; do
  EJK_BENCH_L2=$((2*M)),$((4*M)),$((6*M)),$((8*M)),$((12*M)),$((16*M)),$((24*M)) EJK_BENCH_D=64 EJK_BENCH_S=$s \
    EJK_BENCH_CAUSAL=1 EJK_BENCH_VARIANTS='d64.bq128.bk128.causal.wgmma$,d64.bq192.bk128.causal.wgmma$' \
    timeout 60 $B bench >> $O/l2.txt 2>&1
done; done
python3 - $O <<'PY'
import json, sys, statistics, collections
rows = collections.defaultdict(list)
for l in open(sys.argv[1] + "/l2.txt"):
    if l.startswith("{"):
        j = json.loads(l); rows[(j["s"], j["variant"], j.get("l2_kv_bytes", 0) >> 20)].append(j["tflops"])
for k in sorted(rows): print(k[0], f"{k[2]:3d} MiB", f"{statistics.median(rows[k]):6.1f}", rows[k], k[1])
PY
echo "l2 sweep ($(( $(date +%s) - t0 )) s)"
run_paired() {  # name passes d s causal
  timeout 240 python3 bench/cuda/paired.py $B $O/paired_$1 --passes $2 --d $3 --s $4 --causal $5 > $O/paired_$1.txt 2>&1
  echo "paired $1 rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n +2 $O/paired_$1.txt | grep -v "^$" | tail -3
}
run_paired d64c 5 64 1024,2048 1
run_paired d64n 3 64 1024 0
run_paired d128n 3 128 16384 0
run_paired d256c 3 256 1024 1
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
