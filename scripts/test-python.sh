#!/usr/bin/env bash
# The Python package's tests (python/tests: JAX on the CPU) against a build's libraries, without
# building the project again: a venv in BUILD/pyenv with the pinned jax, numpy and pytest from PyPI
# (python/tests/requirements.txt), libejk_jax (the XLA FFI handlers, with that jax's headers) added
# to the build, then pytest with EJK_LIBRARY_DIR=BUILD/runtime and a fresh cache.
# Usage: scripts/test-python.sh [BUILD]   (default: build, scripts/test.sh's Release build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
venv=$build/pyenv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -r python/tests/requirements.txt
cmake -S . -B "$build" -DEJK_BUILD_JAX=ON -DPython3_EXECUTABLE="$venv/bin/python" >/dev/null
cmake --build "$build" --target ejk_jax
rm -rf "$build/test-cache-python"
EJK_LIBRARY_DIR="$build/runtime" EJK_CACHE_DIR="$build/test-cache-python" PYTHONPATH="$PWD/python" \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider python/tests
