#!/usr/bin/env bash
# Run 67: v95/v96 (the backward's input loads in one round trip too) beside v94; v95/v96 tests.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
build/mamba3-jit-warmup --config variant=v94,chunk=32,threads=256 --config variant=v96,chunk=32,threads=256 > $OUT/warmup.log 2>&1; echo "warmup rc=$? $(( $(date +%s)-t0 ))s"; tail -1 $OUT/warmup.log
timeout 40 python3 -m pytest -q -rs tests/python/test_operator_gpu.py -k "v95 or v96" > $OUT/tests.log 2>&1; echo "targeted rc=$? $(( $(date +%s)-t0 ))s"; tail -1 $OUT/tests.log
timeout 60 python3 tools/bench.py --solver methods/versions/v94/solver.py --solver methods/versions/v96/solver.py --json $OUT/bench.json > $OUT/bench.log 2>&1; echo "bench rc=$? $(( $(date +%s)-t0 ))s"
grep -E "m3_cp_backward|m3_cp_forward|^\[" $OUT/bench.log | head -40
tail -12 $OUT/bench.log
