#!/bin/bash
# Session 9 call 2: ncu source-level (SASS) stall profile of the head_dim 64 kernels (never taken
# before: session 4 profiled head_dim 128 only). .carry/v27p = bench/cuda/build_prebuilt.sh with
# -lineinfo on main's code (d99781a). One launch each (the 4th of the kernel), card clocks left alone.
cd "$(dirname "$0")/../../../.."
B=.carry/v27p/check_flash; O=$OUT/c2; mkdir -p $O
ncu --version | tail -1
prof() {  # name, kernel regex (mangled), env for the bench
  local name=$1 re=$2; shift 2
  env "$@" timeout 150 ncu --clock-control none --set full --import-source yes \
    --kernel-name-base mangled -k "regex:$re" --launch-skip 3 --launch-count 1 \
    -o $O/$name $B bench > $O/$name.log 2>&1 || tail -5 $O/$name.log
  ncu -i $O/$name.ncu-rep --page source --csv --print-source sass > $O/$name.sass.csv 2> $O/$name.err || head -3 $O/$name.err
  ncu -i $O/$name.ncu-rep --page details > $O/$name.details.txt 2>&1
  ncu -i $O/$name.ncu-rep --page raw --csv > $O/$name.raw.csv 2>&1
}
# 128 x 128 causal 1k: Q in registers (default) and its Q-in-shared-memory twin; 192 x 128 causal 4k
prof d64c1k_qreg 'Li64ELi128ELi128E.*Sm90ScheduleE0ELNS2_12Sm90QOperandE0E' EJK_BENCH_D=64 EJK_BENCH_S=1024 EJK_BENCH_CAUSAL=1 EJK_BENCH_VARIANTS=d64.bq128.bk128.causal.wgmma
prof d64c1k_qsmem 'Li64ELi128ELi128E.*Sm90ScheduleE0ELNS2_12Sm90QOperandE1E' EJK_BENCH_D=64 EJK_BENCH_S=1024 EJK_BENCH_CAUSAL=1 EJK_BENCH_VARIANTS=d64.bq128.bk128.causal.wgmma.qsmem
prof d64c4k_bq192 'Li64ELi192ELi128E.*Lb1ELi0ELNS2_12Sm90ScheduleE0ELNS2_12Sm90QOperandE0E' EJK_BENCH_D=64 EJK_BENCH_S=4096 EJK_BENCH_CAUSAL=1 EJK_BENCH_VARIANTS=d64.bq192.bk128.causal.wgmma
ls -la $O
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
