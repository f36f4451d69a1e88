#!/usr/bin/env bash
# Run 109 (twentieth session): v154 = v144 (the 32-token set with v142's layout and state copy) with
# v148's m, x, t1 and t2 rows; v155 picks v148's kernels from two waves of chunk-64 forward jobs and
# v154's below (v149 picks v103's there). Prediction: c00's backward 6 to 9 us below v149's (v144's
# 5 us over v103 in run 104, plus v148's 3 to 5%), the wide cases unchanged (the same kernels).
# Correctness first (v154 bitwise v144, dispatch, waves, streams and graphs), then the bench of
# v149 and v155 in one process: c00 in six interleaved passes, then the whole panel.
# Carry ["scratch", ".deps"]; scratch/shared holds SPEC.md, VJP.md and cases.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 150 python3 -m pytest -q tests/python/test_operator_gpu.py tests/python/test_streams_graphs_gpu.py \
  -k "v154 or v155" > $OUT/tests.log 2>&1
rc=$?; echo "tests rc=$rc $(( $(date +%s)-t0 ))s"; grep -E "passed|failed|Error|assert" $OUT/tests.log | head -20
[ $rc -eq 0 ] || { echo "not correct: no timing"; exit 1; }
timeout 100 python3 tools/bench.py --solver methods/versions/v149/solver.py --solver methods/versions/v155/solver.py \
  --no-baseline --cases-filter c00 --reps 6 --json $OUT/bench_c00.json > $OUT/bench_c00.log 2>&1
echo "bench c00 rc=$? $(( $(date +%s)-t0 ))s"; grep -E '^\[|m3_cp_|^    v1' $OUT/bench_c00.log | head -30
timeout 200 python3 tools/bench.py --solver methods/versions/v149/solver.py --solver methods/versions/v155/solver.py \
  --no-baseline --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"; grep -E '^\[|^    v1' $OUT/bench.log | head -30
