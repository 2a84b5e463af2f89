#!/bin/bash
# Session 14 call 1: v51 (the consumers' wait for their own P V moved below the softmax: ptxas
# had hoisted it above every exponential in all 48 bench kernels) against main (v50). Two
# alternating passes over the heuristic's defaults at every head_dim (1k, 2k, 4k, 16k at 64;
# 1k, 4k, 16k at 128 and 256; both masks); then the checks on v51.
cd "$(dirname "$0")/../../../.."
O=$OUT/c1; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
A=.carry/v50/check_flash; B=.carry/v51/check_flash
t0=$(date +%s)
bash bench/cuda/ab_builds.sh $O/ab 2 v50=$A v51=$B \
  '64:1024:bf16.d64.bq128.bk128.wgmma$,bf16.d64.bq128.bk128.causal.wgmma$' \
  '64:2048:bf16.d64.bq192.bk128.wgmma$,bf16.d64.bq128.bk128.causal.wgmma$' \
  '64:4096,16384:bf16.d64.bq192.bk128.wgmma$,bf16.d64.bq192.bk128.causal.wgmma$' \
  '128:1024,4096,16384:bf16.d128.bq128.bk128.wgmma$,bf16.d128.bq128.bk128.causal.wgmma$' \
  '128:16384:bf16.d128.bq128.bk192.causal.wgmma$' \
  '256:1024,4096,16384:bf16.d256.bq128.bk80.wgmma$,bf16.d256.bq128.bk80.causal.wgmma$'
echo "ab: $(( $(date +%s) - t0 )) s" | tee $O/times.txt
{ timeout 120 $B check 20261121 | tail -1
  EJK_PERSISTENT_GRID=3 timeout 150 $B check $RANDOM | tail -1
  EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 timeout 100 $B check $RANDOM 12 12 | tail -1
  EJK_PERSISTENT_GRID=3 timeout 150 $B check-bench $RANDOM | tail -1; } | tee $O/check.txt
echo "total: $(( $(date +%s) - t0 )) s" | tee -a $O/times.txt
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
