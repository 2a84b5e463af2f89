#!/bin/bash
# Session 19 call 1: v68 (the producer's tile loop and the varlen O copy not unrolled, the
# causal order's GQA ratio in 32 bits: cubin 60816 -> 49040 B at d128 causal). NVRTC cold
# compiles of main's headers and v68's interleaved (nvrtc_phases.py, one compile per process),
# v68's full check, and v68 against main's kernels (.carry/m19, rebuilt: same resources as s16) in three passes.
cd "$(dirname "$0")/../../../.."
O=$OUT/c1; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
nproc >> $O/gpu.txt; lscpu | grep "Model name" >> $O/gpu.txt
here=$PWD
for r in 1 2 3 4; do
  for k in "--d 128 --causal" "--d 128 --causal --segments" "--d 128 --segments --sinks --bias" "--d 64 --bq 192" "--d 256 --bk 80 --causal"; do
    for v in main v68; do
      (cd .carry/abl/$v && python3 $here/bench/cuda/nvrtc_phases.py $k --runs 1 | tail -1 | sed "s/^/$v /") >> $O/nvrtc.txt 2>&1
    done
  done
done
EJK_PREBUILT=.carry/v68 OUT=$O/check timeout 300 bash bench/cuda/build_and_check.sh check > $O/check.txt 2>&1
echo "check rc=$?"; tail -12 $O/check.txt
V64='bf16.d64.bq192.bk128.wgmma$,bf16.d64.bq128.bk128.causal.wgmma$,bf16.d64.bq192.bk128.causal.wgmma$'
V128='bf16.d128.bq128.bk128.wgmma$,bf16.d128.bq128.bk128.causal.wgmma$,bf16.d128.bq128.bk192.causal.wgmma$'
V256='bf16.d256.bq128.bk80.wgmma$,bf16.d256.bq128.bk80.causal.wgmma$'
timeout 200 bash bench/cuda/ab_builds.sh $O/ab 3 main=.carry/m19/check_flash v68=.carry/v68/check_flash \
  "64:1024,2048,4096,16384:$V64" "128:1024,4096,16384:$V128" "256:1024,8192:$V256" > $O/ab.txt 2>&1
tail -30 $O/ab.txt
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
