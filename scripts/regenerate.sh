#!/usr/bin/env bash
# Refreshes generated/: ejk-gen's sources for every spec's default CPU AOT set, committed so a
# reader can browse real variants. Run it after changing a spec, a template or the generator;
# the ctest check build.generated_up_to_date fails until it has been run.
#
#   scripts/regenerate.sh                 builds ejk-gen (core + generator only) in build-gen/
#                                         if needed, then rewrites generated/
#   scripts/regenerate.sh --gen EJK_GEN --out DIR
#                                         that ejk-gen, into DIR (what the ctest check runs)
set -euo pipefail
cd "$(dirname "$0")/.."
gen="" out=generated
while [ $# -gt 0 ]; do
  case $1 in
    --gen) gen=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--gen EJK_GEN] [--out DIR]" >&2; exit 2 ;;
  esac
done

if [ -z "$gen" ]; then
  scripts/setup-deps.sh
  dir=build-gen
  [ -f "$dir/CMakeCache.txt" ] ||
    cmake -S generator/host -B "$dir" -G Ninja -DEJK_ROOT="$PWD" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$dir" --target ejk-gen -j "$(nproc)" >/dev/null
  gen=$dir/generator/ejk-gen
fi
# Relative inputs: the banners name specs/ and templates/ the same wherever the checkout is.
# ejk-gen rewrites changed files only and removes variants the specs no longer list.
"$gen" --specs specs --templates templates --kernels kernels --out "$out" --backends cpu --only sources
