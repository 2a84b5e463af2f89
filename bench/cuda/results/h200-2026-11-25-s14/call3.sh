#!/bin/bash
# Session 14 call 3: why v51 / v52 lose at head_dim 64. ncu --set full on one launch of the
# d64 128 x 128 non-causal kernel at S = 1k (v50, v51, v52) and of d256 128 x 80 non-causal at
# 4k (v50, v52), card clocks left alone; the source page (SASS) of each for ncu_stalls.py.
cd "$(dirname "$0")/../../../.."
O=$OUT/c3; mkdir -p $O
prof() {  # name, binary, kernel regex (mangled), env for the bench
  local name=$1 bin=$2 re=$3; shift 3
  env "$@" timeout 150 ncu --clock-control none --set full --import-source no \
    --kernel-name-base mangled -k "regex:$re" --launch-skip 3 --launch-count 1 \
    -o $O/$name $bin bench > $O/$name.log 2>&1 || tail -5 $O/$name.log
  ncu -i $O/$name.ncu-rep --page details > $O/$name.details.txt 2>&1
  ncu -i $O/$name.ncu-rep --page raw --csv > $O/$name.raw.csv 2>&1
  ncu -i $O/$name.ncu-rep --page source --csv --print-source sass > $O/$name.sass.csv 2>&1
  python3 bench/cuda/ncu_stalls.py $O/$name.sass.csv 12 > $O/$name.stalls.txt 2>&1
  echo "== $name"; grep -E "Duration|Compute \(SM\) Throughput|Issue Slots Busy|Issued Ipc|Warp Cycles Per Issued" $O/$name.details.txt | head -6
  head -14 $O/$name.stalls.txt
}
D64='EJK_BENCH_D=64 EJK_BENCH_S=1024 EJK_BENCH_CAUSAL=0 EJK_BENCH_VARIANTS=bf16.d64.bq128.bk128.wgmma$'
for v in v50 v51 v52; do prof d64_$v .carry/$v/check_flash 'Li64ELi128ELi128E' $D64; done
D256='EJK_BENCH_D=256 EJK_BENCH_S=4096 EJK_BENCH_CAUSAL=0 EJK_BENCH_VARIANTS=bf16.d256.bq128.bk80.wgmma$'
for v in v50 v52; do prof d256_$v .carry/$v/check_flash 'Li256ELi128ELi80E' $D256; done
rm -f $O/*.ncu-rep
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
