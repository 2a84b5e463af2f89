#!/usr/bin/env bash
# Builds the standalone CUDA check/bench (check_flash: check_flash.cu + bench_flash.cu) with
# nvcc, then: the correctness matrix, compute-sanitizer on a few variants, our bf16 grid and
# the PyTorch SDPA peers on the same grid. From the repository root:
#   bench/cuda/build_and_check.sh [build|check|bench|all]   (default all)
# build needs nvcc only (no GPU); the others run on the GPU machine. Results go to $OUT
# (default out/bench/cuda), the binary to $EJK_BIN_DIR (default out/bench/cuda/bin) with the
# ptxas logs (registers / spills per kernel).
# EJK_PREBUILT=dir: take check_flash from dir (made by `build` on another machine and carried
# over) instead of building it here: saves device time.
# EJK_CUDA_GENCODE overrides the target (default sm_90a); extra nvcc flags in EJK_NVCC_FLAGS
# (e.g. -DEJK_SM90_PROBE for the per-phase probe of bench_flash.cu).
set -euo pipefail
what=${1:-all}
out=${OUT:-out/bench/cuda}
mkdir -p "$out"

build() {
  local d=$1
  mkdir -p "$d"
  local arch=${EJK_CUDA_GENCODE:--gencode=arch=compute_90a,code=sm_90a}
  local flags=(-std=c++20 -O3 -I kernels -I bench/cuda $arch -Xptxas -v ${EJK_NVCC_FLAGS:-})
  nvcc "${flags[@]}" -c bench/cuda/check_flash.cu -o "$d/check.o" 2> "$d/ptxas_check.log" &
  nvcc "${flags[@]}" -c bench/cuda/bench_flash.cu -o "$d/bench.o" 2> "$d/ptxas_bench.log" &
  wait %1 && wait %2 || { grep -v ptxas "$d"/ptxas_*.log | head -40; exit 1; }
  nvcc $arch "$d/check.o" "$d/bench.o" -o "$d/check_flash"
  rm -f "$d/check.o" "$d/bench.o"
  # ptxas's C75xx warnings: wgmmas serialized, a kernel that passes the check at a fraction of
  # its speed (docs/design/flash_fwd_cuda.md, "The tile loop"). Said loudly; the build goes on.
  grep -h '(C75' "$d"/ptxas_*.log | sed 's/^/WARNING: /' >&2 || true
}

bindir=${EJK_BIN_DIR:-out/bench/cuda/bin}
if [[ $what == build ]]; then
  build "$bindir"
  echo "$bindir/check_flash"
  exit 0
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
nvcc --version | tail -1 || true
if [[ -n ${EJK_PREBUILT:-} ]]; then
  bindir=$EJK_PREBUILT
else
  t0=$(date +%s)
  build "$bindir"
  echo "build: $(( $(date +%s) - t0 )) s"
fi
cp "$bindir"/ptxas_*.log "$out/" 2>/dev/null || true
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
  # items on these problems, too few to cross item boundaries (a race between the Q release
  # and the ldmatrix loads showed only on such grids).
  EJK_PERSISTENT_GRID=3 timeout 240 $bin check-bench $RANDOM > "$out/check_bench.txt" || ok=0
  grep -v '^PASS' "$out/check_bench.txt" || true
  [[ $ok == 1 ]] || { echo "CHECK FAILED: not timing anything"; exit 1; }
  # memcheck on wgmma variants of both schedules (index 12 on in check_variants, Q in registers:
  # 12-13 head_dim 128 persistent, taking item records; 14 head_dim 64 one block per item;
  # 22-23 forced persistent head_dim 128 causal and 256 with every flag), racecheck on a
  # per-item head_dim 256 causal (15), a persistent one-consumer (16) and a persistent causal
  # ping-pong kernel (22, the causal order; 16 and 22 take item records), persistent grids of 5.
  # Summaries also go to sanitizers.txt (callers tail this script's output).
  for v in "3 12" "2 22"; do
    EJK_PERSISTENT_GRID=5 timeout 150 compute-sanitizer --tool memcheck --print-limit 5 $bin check 8 $v | tail -2 || echo "compute-sanitizer: failed or unavailable"
  done | tee "$out/sanitizers.txt"
  for v in "2 15" "1 22"; do
    EJK_PERSISTENT_GRID=5 timeout 150 compute-sanitizer --tool racecheck --print-limit 5 $bin check 9 $v | tail -2 || echo "compute-sanitizer: failed or unavailable"
  done | tee -a "$out/sanitizers.txt"
fi
if [[ $what == bench || $what == all ]]; then
  $bin bench | tee "$out/ours.jsonl" > /dev/null
  PYTHONUNBUFFERED=1 python3 bench/cuda/bench_vs_peers.py "$out/ours.jsonl" "$out/peers.jsonl" | tee "$out/table.txt"
fi
if [[ $what == all ]]; then
  # Every peer (FlexAttention, JAX cuDNN too) on one grid shape, for the record.
  timeout 180 python3 bench/cuda/peers.py flash --b 4 --hq 16 --hkv 16 --s 4096 --d 128 --causal | tee "$out/peers_full.jsonl" || true
fi
