#!/usr/bin/env bash
# Run 76: the full warm-up and the whole Python suite (with the contract files carried along),
# v104 the default (3c84095). Run 77 follows with the selfcheck and the bench.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
build/mamba3-jit-warmup > $OUT/warmup.log 2>&1; echo "warmup rc=$? $(( $(date +%s)-t0 ))s"; tail -1 $OUT/warmup.log
timeout 400 python3 -m pytest -q -rs tests/python > $OUT/pytest.log 2>&1; echo "pytest rc=$? $(( $(date +%s)-t0 ))s"; tail -3 $OUT/pytest.log
