#!/usr/bin/env bash
# Run 105 (nineteenth session): v146 = v142 whose update loads the successor's state gradient for
# all of its row pairs before using any (one L2 round trip instead of two; run 102's profile of
# v142: those loads and their first use about 9% of the stall samples). Its tests (bitwise twins of
# v135, dispatch, waves, streams and graphs), then the bench of v147 and v143 in one process.
# Carry ["scratch", ".deps"]; scratch/shared holds SPEC.md, VJP.md and cases.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 150 python3 -m pytest -q tests/python/test_operator_gpu.py tests/python/test_streams_graphs_gpu.py \
  -k "v146 or v147" > $OUT/tests.log 2>&1
rc=$?; echo "tests rc=$rc $(( $(date +%s)-t0 ))s"; grep -E "passed|failed|Error|assert" $OUT/tests.log | head -20
[ $rc -eq 0 ] || { echo "not correct: no timing"; exit 1; }
timeout 150 python3 tools/bench.py --solver methods/versions/v147/solver.py --solver methods/versions/v143/solver.py \
  --no-baseline --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"; grep -E '^\[|m3_cp_backward|^    v1' $OUT/bench.log | head -50
