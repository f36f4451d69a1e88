#!/usr/bin/env bash
# The test command: builds everything, runs the C++ tests (ctest) and the Python tests (pytest).
# GPU tests skip cleanly where no GPU is present.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash tools/build.sh
# The tests get a cache of their own, so they never read a user's cache.
export MAMBA3_JIT_CACHE_DIR="${MAMBA3_JIT_CACHE_DIR:-$root/build/test-cache}"
echo "== ctest"
ctest --test-dir build --output-on-failure -j "$(nproc)"
# With a GPU, the Python tests would JIT-compile every variant they touch one at a time on first
# use (about 15 s each); the warm-up compiles them all in parallel first. Without a GPU, ctest
# has already compiled every specialisation and the GPU tests skip.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "== warm-up"
  build/mamba3-jit-warmup
fi
echo "== pytest"
python3 -m pytest -q -rs --durations=10 tests/python
