#!/usr/bin/env bash
# The installed package from outside the tree: installs a build into a temporary prefix, moves
# the prefix (the installation must not depend on where it was installed), then configures,
# builds and runs examples/consumer/ against it. LLVM's and Clang's CMake packages are disabled
# there: a program must build without them, as on a machine that has no LLVM.
# Usage: scripts/test-package.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cmake --install "$build" --prefix "$tmp/staging" >/dev/null
mv "$tmp/staging" "$tmp/prefix"
cmake -S examples/consumer -B "$tmp/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" \
      -DCMAKE_DISABLE_FIND_PACKAGE_LLVM=ON -DCMAKE_DISABLE_FIND_PACKAGE_Clang=ON >/dev/null
cmake --build "$tmp/consumer" -j "$(nproc)"
(cd "$tmp/consumer" && ctest --output-on-failure --no-tests=error)
