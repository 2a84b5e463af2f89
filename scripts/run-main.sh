#!/usr/bin/env bash
# The main job: install dependencies, build, and run flash attention on the CPU with a check
# against the float64 reference. Extra arguments go to `ejk run flash_attention`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DEJK_BUILD_TESTS=OFF >/dev/null
cmake --build build --target ejk_cli
if [ $# -eq 0 ]; then
  set -- --b 1 --sq 1024 --sk 1024 --hq 8 --hkv 8 --d 128 --causal --dtype bf16 --check
fi
exec build/cli/ejk run flash_attention "$@"
