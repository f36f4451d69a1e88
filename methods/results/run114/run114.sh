#!/usr/bin/env bash
# Run 114 (twenty-second session): v164/v165 (v148 and v154 with v161's reduce alone) against their
# twins, dispatch, waves, streams and graphs; the bench of v155, v163 and v166 in three interleaved
# passes; then v166 as the default: the tests that call the default on the GPU and two selfchecks.
# Carry ["scratch", ".deps"]; scratch/shared holds SPEC.md, VJP.md and cases.
set -uo pipefail
[ -d /tmp/deps ] || for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py tests/python/test_streams_graphs_gpu.py \
  -k "v164 or v165 or v166" > $OUT/tests_v164.log 2>&1
echo "tests v164-v166 rc=$? $(( $(date +%s)-t0 ))s"; tail -2 $OUT/tests_v164.log
timeout 330 python3 tools/bench.py --solver methods/versions/v155/solver.py --solver methods/versions/v163/solver.py \
  --solver methods/versions/v166/solver.py --no-baseline --reps 3 --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"; grep -E '^\[|^    v1|summary|geomean' $OUT/bench.log | head -60
