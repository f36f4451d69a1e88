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
ctest --test-dir build --output-on-failure -j 2
echo "== pytest"
python3 -m pytest -q tests/python
