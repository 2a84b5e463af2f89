#!/usr/bin/env bash
# The Python package's PyTorch tests (python/tests/test_torch*.py: CPU, and CUDA where torch sees
# a GPU) against a build's libraries: libejk_torch built into BUILD against the torch of the
# interpreter that runs them, then pytest with EJK_LIBRARY_DIR=BUILD/runtime and a fresh cache.
# Nothing is downloaded: the interpreter ($EJK_TORCH_PYTHON, else python3) must import torch
# (>= 2.10), numpy and pytest, e.g. a GPU machine's system-wide torch; a skipped module there would
# hide a failure, so EJK_REQUIRE_TORCH=1 makes a missing torch or libejk_torch an error.
# Usage: scripts/test-torch.sh [BUILD] [pytest args...]   (default: build, scripts/test.sh's Release build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
shift || true
py=$(command -v "${EJK_TORCH_PYTHON:-python3}")
if ! "$py" -c "import torch, numpy, pytest" 2>/dev/null; then
  echo "test-torch.sh: $py cannot import torch, numpy and pytest; set EJK_TORCH_PYTHON to one that can" >&2
  exit 1
fi
"$py" -c "import torch; print(f'torch {torch.__version__} (CUDA {torch.version.cuda}, GPU: {torch.cuda.is_available()}) in $py')"
cmake -S . -B "$build" -DEJK_BUILD_TORCH=ON -DPython3_EXECUTABLE="$py" >/dev/null
cmake --build "$build" --target ejk_torch
rm -rf "$build/test-cache-torch"
EJK_REQUIRE_TORCH=1 EJK_LIBRARY_DIR="$build/runtime" EJK_CACHE_DIR="$build/test-cache-torch" PYTHONPATH="$PWD/python" \
  "$py" -m pytest -q -rs -p no:cacheprovider python/tests/test_torch*.py "$@"
