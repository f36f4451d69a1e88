#!/usr/bin/env bash
# Run 97 (eighteenth session): v137 picks v135's kernels or v103's by how many waves the chunk-64
# forward's jobs make. Correctness first (its correctness tests, the dispatch test with 2,272 jobs,
# the few-waves test bitwise v103), then the bench beside v104 and v136 and the selfcheck of v137.
# Run from the repository root with carry ["scratch", ".deps"] and scratch/shared holding
# SPEC.md, VJP.md and cases. Few files under $OUT: only a handful come back.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
for c in c00 c06 c01; do
  MAMBA3_JIT_LOG_LEVEL=debug timeout 60 python3 methods/results/run92/ncu_fwd.py $c methods/versions/v137/solver.py \
    2>&1 | grep -E "waves|rror" | head -3 >> $OUT/debug_calls_v137.log
done
cat $OUT/debug_calls_v137.log
timeout 200 python3 -m pytest -q tests/python/test_operator_gpu.py -k "v137" > $OUT/tests.log 2>&1
rc=$?; echo "tests rc=$rc $(( $(date +%s)-t0 ))s"; grep -E "passed|failed|Error|assert" $OUT/tests.log | head -20
[ $rc -eq 0 ] || { echo "not correct: no timing"; exit 1; }
timeout 240 python3 tools/bench.py --solver methods/versions/v104/solver.py --solver methods/versions/v136/solver.py \
  --solver methods/versions/v137/solver.py --no-baseline --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"; grep -E '^\[|m3_cp_forward|^    v1|geomean' $OUT/bench.log | head -70
timeout 150 python3 tools/selfcheck.py --solver methods/versions/v137/solver.py > $OUT/selfcheck_v137.log 2>&1
echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s"; tail -12 $OUT/selfcheck_v137.log
