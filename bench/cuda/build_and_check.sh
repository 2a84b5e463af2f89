#!/usr/bin/env bash
# Build the standalone CUDA check/bench with nvcc, then: correctness matrix, compute-sanitizer
# memcheck on a few variants, our bf16 grid benchmark and the peers on the same grid.
# Runs on the GPU machine from the repository root; results go to $OUT (or ./out).
#   bench/cuda/build_and_check.sh [check|bench|all]   (default all)
# EJK_PREBUILT=dir: take check_flash and runtime_smoke from dir (built on another machine with
# the same commands, carried over) instead of building them here: saves device time.
set -euo pipefail
what=${1:-all}
out=${OUT:-out}
mkdir -p "$out" build-cuda-check
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
nvcc --version | tail -1
bindir=build-cuda-check
if [[ -n ${EJK_PREBUILT:-} ]]; then
  bindir=$EJK_PREBUILT
else
  t0=$(date +%s)
  bash bench/cuda/build_prebuilt.sh "$bindir"
  echo "build: $(( $(date +%s) - t0 )) s"
fi
cp "$bindir"/resources.txt "$out/" 2>/dev/null || true
cat "$out/resources.txt" 2>/dev/null || true  # registers / spills per kernel, one line each
bin=$bindir/check_flash
if [[ $what == check || $what == all ]]; then
  # A failed (or hung) check stops the script: never time a kernel that failed its check.
  ok=1
  timeout 120 $bin check 20261121 > "$out/check.txt" || ok=0
  grep -v '^PASS' "$out/check.txt" || true
  # Persistent kernels on 3 blocks: every block loops over many work items (ring and Q
  # barrier phases across items, ping-pong across items) even on these small problems.
  EJK_PERSISTENT_GRID=3 timeout 180 $bin check $RANDOM > "$out/check_random.txt" || ok=0
  grep -v '^PASS' "$out/check_random.txt" || true
  # The persistent causal order with head groups of one kv head (many groups, padded rounds;
  # flash_fwd_sm90_schedule.cuh sm90_causal_order), wgmma variants only.
  EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 timeout 120 $bin check $RANDOM 12 12 > "$out/check_l2_groups.txt" || ok=0
  grep -v '^PASS' "$out/check_l2_groups.txt" || true
  # Persistent causal blocks without a tile counter (FlashFwdParams::tile_counter null: items
  # n * grid + block instead of drawn), wgmma variants only.
  EJK_PERSISTENT_GRID=3 EJK_NO_TILE_COUNTER=1 timeout 120 $bin check $RANDOM 12 12 > "$out/check_no_counter.txt" || ok=0
  grep -v '^PASS' "$out/check_no_counter.txt" || true
  # The bench list (the heuristic's defaults and their twins) on grids of 3 too: the check
  # list above does not hold every default key, and a full grid gives each block one or two
  # items on these problems (NOTES.md session 11).
  EJK_PERSISTENT_GRID=3 timeout 240 $bin check-bench $RANDOM > "$out/check_bench.txt" || ok=0
  grep -v '^PASS' "$out/check_bench.txt" || true
  [[ $ok == 1 ]] || { echo "CHECK FAILED: not timing anything"; exit 1; }
  # memcheck on wgmma variants of both schedules (index 12 on in check_variants, Q in registers:
  # 12-13 head_dim 128 persistent, taking item records; 14 head_dim 64 one block per item;
  # 22-23 forced persistent head_dim 128 causal and 256 with every flag; the mma.sync family was
  # checked in runs 1-9 and is unchanged), racecheck on a per-item head_dim 256 causal (15), a
  # persistent one-consumer (16) and a persistent causal ping-pong kernel (22, the causal snake
  # order; 16 and 22 take item records), persistent grids of 5.
  # Summaries also go to sanitizers.txt (callers tail this script's output).
  for v in "3 12" "2 22"; do
    EJK_PERSISTENT_GRID=5 timeout 150 compute-sanitizer --tool memcheck --print-limit 5 $bin check 8 $v | tail -2 || echo "compute-sanitizer: failed or unavailable"
  done | tee "$out/sanitizers.txt"
  for v in "2 15" "1 22"; do
    EJK_PERSISTENT_GRID=5 timeout 150 compute-sanitizer --tool racecheck --print-limit 5 $bin check 9 $v | tail -2 || echo "compute-sanitizer: failed or unavailable"
  done | tee -a "$out/sanitizers.txt"
  # The runtime's own path: template -> NVRTC (dlopen) -> cuModuleLoadData -> cuLaunchKernel,
  # and past the 65535 of gridDim.y / z (70000 sequences, 70000 heads; ~1 min of host time).
  "$bindir"/runtime_smoke run | tee "$out/runtime_smoke.txt"
  "$bindir"/runtime_smoke run-large | tee -a "$out/runtime_smoke.txt"
fi
if [[ $what == bench || $what == all ]]; then
  $bin bench | tee "$out/ours.jsonl" > /dev/null
  PYTHONUNBUFFERED=1 python3 bench/cuda/bench_vs_peers.py "$out/ours.jsonl" "$out/peers.jsonl" | tee "$out/table.txt"
fi
if [[ $what == all ]]; then
  # Every peer (FlexAttention, JAX cuDNN too) on one grid shape, for the record.
  timeout 180 python3 bench/cuda/peers.py flash --b 4 --hq 16 --hkv 16 --s 4096 --d 128 --causal | tee "$out/peers_full.jsonl" || true
fi
