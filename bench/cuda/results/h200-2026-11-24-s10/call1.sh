#!/bin/bash
# Session 10 call 1: is the L2 -> SM path (K/V tiles through TMA) near its limit on the long
# non-causal rows? ncu --set full on one launch of each default non-causal sm90a key at S = 8k
# (d128 128x128, d64 192x128, d256 128x80), card clocks left alone. .carry/v32 =
# bench/cuda/build_prebuilt.sh .carry/v32 -lineinfo on main + the anchored EJK_BENCH_VARIANTS.
cd "$(dirname "$0")/../../../.."
B=.carry/v32/check_flash; O=$OUT/c1; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
prof() {  # name, kernel regex (mangled), env for the bench
  local name=$1 re=$2; shift 2
  env "$@" timeout 200 ncu --clock-control none --set full \
    --kernel-name-base mangled -k "regex:$re" --launch-skip 3 --launch-count 1 \
    -o $O/$name $B bench > $O/$name.log 2>&1 || tail -5 $O/$name.log
  ncu -i $O/$name.ncu-rep --page details > $O/$name.details.txt 2>&1
  ncu -i $O/$name.ncu-rep --page raw --csv > $O/$name.raw.csv 2>&1
  grep -E "Duration|L2 Cache Throughput|DRAM Throughput|Memory Throughput|L1/TEX Hit|L2 Hit|Compute \(SM\)|SM Frequency|Max Bandwidth|Mem Busy|Mem Pipes" $O/$name.details.txt | head -20
}
prof d128nc8k 'Li128ELi128ELi128E' EJK_BENCH_D=128 EJK_BENCH_S=8192 EJK_BENCH_CAUSAL=0 'EJK_BENCH_VARIANTS=bf16.d128.bq128.bk128.wgmma$'
prof d64nc8k 'Li64ELi192ELi128E' EJK_BENCH_D=64 EJK_BENCH_S=8192 EJK_BENCH_CAUSAL=0 'EJK_BENCH_VARIANTS=bf16.d64.bq192.bk128.wgmma$'
prof d256nc8k 'Li256ELi128ELi80E' EJK_BENCH_D=256 EJK_BENCH_S=8192 EJK_BENCH_CAUSAL=0 'EJK_BENCH_VARIANTS=bf16.d256.bq128.bk80.wgmma$'
rm -f $O/*.ncu-rep
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
