#!/usr/bin/env bash
# Run 106 (twentieth session): the variants compiled last session and not run. v148/v149: v142 with
# the m, x, t1 and t2 tiles in v138's rows (prediction: backward 1 to 2% below v142's); v150/v151:
# v148 whose state copy writes consecutive shared slots (prediction: the copy's excess shared
# wavefronts near zero, the backward at most about 2% faster). Correctness first (bitwise twins of
# v135, dispatch, streams and graphs), then the bench of v143 (the default), v149 and v151 in one
# process. Carry ["scratch", ".deps"]; scratch/shared holds SPEC.md, VJP.md and cases.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 200 python3 -m pytest -q tests/python/test_operator_gpu.py tests/python/test_streams_graphs_gpu.py \
  -k "v148 or v149 or v150 or v151" > $OUT/tests.log 2>&1
rc=$?; echo "tests rc=$rc $(( $(date +%s)-t0 ))s"; grep -E "passed|failed|Error|assert" $OUT/tests.log | head -20
[ $rc -eq 0 ] || { echo "not correct: no timing"; exit 1; }
timeout 260 python3 tools/bench.py --solver methods/versions/v143/solver.py --solver methods/versions/v149/solver.py \
  --solver methods/versions/v151/solver.py --no-baseline --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"; grep -E '^\[|m3_cp_backward|^    v1' $OUT/bench.log | head -80
