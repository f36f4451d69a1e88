#!/usr/bin/env bash
# Run 104 (nineteenth session): v144 = v103 with v142's row layout and shared state copy (its
# forward's chunk-state product in the plain k order), the 32-token set that v145 runs where the
# chunk-64 forward makes few waves (c00). Its tests (float64 truth, dispatch, waves, streams and
# graphs), then the bench of v145, v143 and v137 in one process, in the reverse of run 102's order.
# Carry ["scratch", ".deps"]; scratch/shared holds SPEC.md, VJP.md and cases.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 200 python3 -m pytest -q tests/python/test_operator_gpu.py tests/python/test_streams_graphs_gpu.py \
  -k "v144 or v145" > $OUT/tests.log 2>&1
rc=$?; echo "tests rc=$rc $(( $(date +%s)-t0 ))s"; grep -E "passed|failed|Error|assert" $OUT/tests.log | head -20
[ $rc -eq 0 ] || { echo "not correct: no timing"; exit 1; }
timeout 220 python3 tools/bench.py --solver methods/versions/v145/solver.py --solver methods/versions/v143/solver.py \
  --solver methods/versions/v137/solver.py --no-baseline --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"; grep -E '^\[|m3_cp_backward|m3_cp_forward |^    v1' $OUT/bench.log | head -70
