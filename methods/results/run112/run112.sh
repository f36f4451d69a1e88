#!/usr/bin/env bash
# Run 112 (twenty-first session), first part: v158/v159 (the lean angle kernel) and v161/v162 (the
# reduce's deeper loads) against their twins, dispatch, waves, streams and graphs; the bench of the
# default v155 against v160 and v163. The second part is methods/results/run113/run113.sh (same machine).
# Carry ["scratch", ".deps"]; scratch/shared holds SPEC.md, VJP.md and cases.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 180 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py tests/python/test_streams_graphs_gpu.py \
  -k "v158 or v159 or v160 or v161 or v162 or v163" > $OUT/tests_v158.log 2>&1
echo "tests v158-v163 rc=$? $(( $(date +%s)-t0 ))s"; tail -2 $OUT/tests_v158.log
timeout 300 python3 tools/bench.py --solver methods/versions/v155/solver.py --solver methods/versions/v160/solver.py \
  --solver methods/versions/v163/solver.py --no-baseline --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"; grep -E '^\[|^    v1|m3_cp_angles|m3_reduce|m3_cp_backward|summary|geomean' $OUT/bench.log | head -90
