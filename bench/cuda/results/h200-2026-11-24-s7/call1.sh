#!/bin/bash
# Session 7 call 1: kernels as session 6 (44dcb07) plus the bench's causal block_k 64 / 96
# variants; binaries built here by .carry/v29/build.sh. Check (fixed seed), check-bench on
# random persistent grids, runtime_smoke (NVRTC cold per key), then the defaults and the new
# variants with the peers (PyTorch SDPA FA2 / cuDNN) in the same call.
cd "$(dirname "$0")/../../../.."
B=.carry/v29
O=$OUT/c1; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader
timeout 100 $B/check_flash check 20261121 > $O/check.txt; echo "check: $(grep -c ^PASS $O/check.txt) PASS, $(grep -vc ^PASS $O/check.txt) other"; grep -v ^PASS $O/check.txt | tail -3
EJK_PERSISTENT_GRID=3 timeout 150 $B/check_flash check-bench $RANDOM > $O/check_bench.txt; echo "check-bench: $(grep -c ^PASS $O/check_bench.txt) PASS"; grep -v ^PASS $O/check_bench.txt | tail -3
grep -q FAIL $O/check.txt $O/check_bench.txt && { echo "CHECK FAILED: not timing"; exit 1; }
CUDA_CACHE_DISABLE=1 timeout 60 $B/runtime_smoke run > $O/runtime_smoke.txt 2>&1; tail -4 $O/runtime_smoke.txt
for k in flash_fwd.cuda.sm90a.bf16.d128.bq128.bk128.causal flash_fwd.cuda.sm90a.f16.d64.bq128.bk64 flash_fwd.cuda.sm90a.bf16.d256.bq128.bk64.causal.win.cap.sink.bias; do
  for i in 1 2; do CUDA_CACHE_DISABLE=1 $B/runtime_smoke compile $k | tail -1; done
done | tee $O/nvrtc.txt
export EJK_BENCH_VARIANTS=d64.bq192.bk128.wgmma,d64.bq192.bk128.causal.wgmma,d64.bq128.bk128.causal.wgmma,d128.bq128.bk128.wgmma,d128.bq128.bk128.causal.wgmma,d128.bq128.bk144.wgmma,d128.bq128.bk192.causal.wgmma,d256.bq128.bk80.wgmma,d256.bq128.bk80.causal.wgmma,d64.bq128.bk64.causal,d64.bq128.bk96.causal,d128.bq128.bk64.causal,d128.bq128.bk96.causal
timeout 200 $B/check_flash bench > $O/ours.jsonl
PYTHONUNBUFFERED=1 timeout 200 python3 bench/cuda/bench_vs_peers.py $O/ours.jsonl $O/peers.jsonl > $O/table.txt 2>&1
cat $O/table.txt | cut -c1-130
