#!/usr/bin/env bash
# Run 80: the full warm-up, the whole Python suite (contract files carried along) and the selfcheck
# on the final commit of the session (7226a88, v104 the default).
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
build/mamba3-jit-warmup > $OUT/warmup.log 2>&1; echo "warmup rc=$? $(( $(date +%s)-t0 ))s"; tail -1 $OUT/warmup.log
timeout 330 python3 -m pytest -q -rs tests/python > $OUT/pytest.log 2>&1; echo "pytest rc=$? $(( $(date +%s)-t0 ))s"; tail -3 $OUT/pytest.log
timeout 100 python3 tools/selfcheck.py --json $OUT/selfcheck_main.json > $OUT/selfcheck_main.log 2>&1; echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s"; tail -2 $OUT/selfcheck_main.log
