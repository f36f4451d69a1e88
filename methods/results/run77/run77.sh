#!/usr/bin/env bash
# Run 77: the selfcheck with v104 the default (3c84095) and the bench of v104 beside v96.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 150 python3 tools/selfcheck.py --json $OUT/selfcheck_main.json > $OUT/selfcheck_main.log 2>&1; echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s"; tail -2 $OUT/selfcheck_main.log
timeout 100 python3 tools/bench.py --solver methods/versions/v96/solver.py --solver methods/versions/v104/solver.py --json $OUT/bench.json --png $OUT/bench.png > $OUT/bench.log 2>&1; echo "bench rc=$? $(( $(date +%s)-t0 ))s"; tail -11 $OUT/bench.log
