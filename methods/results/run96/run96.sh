#!/usr/bin/env bash
# Run 96 (eighteenth session): the chunk-64 forward's address arithmetic. v133 makes each wgmma
# descriptor by one add to its tile's first, v135 also moves KS^T at offsets worked out once;
# both bitwise v119's. Correctness first (bitwise twins against v119, dispatch, streams and
# graphs), then the bench beside v104 and v132, the selfcheck of v136, and ncu of v135's forward.
# Run from the repository root with carry ["scratch", ".deps"] and scratch/shared holding
# SPEC.md, VJP.md and cases.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
for v in v134 v136; do
  MAMBA3_JIT_LOG_LEVEL=debug timeout 60 python3 methods/results/run92/ncu_fwd.py c01 methods/versions/$v/solver.py \
    > $OUT/debug_call_$v.log 2>&1; rc=$?; echo "debug call $v rc=$rc"
  grep -iE "occupancy|error" $OUT/debug_call_$v.log | head -4
  [ $rc -eq 124 ] && { echo "$v hung on c01: stopping"; exit 1; }
done
timeout 200 python3 -m pytest -q tests/python/test_operator_gpu.py tests/python/test_streams_graphs_gpu.py \
  -k "v133 or v134 or v135 or v136" > $OUT/tests.log 2>&1
rc=$?; echo "tests rc=$rc $(( $(date +%s)-t0 ))s"; grep -E "passed|failed|Error|assert" $OUT/tests.log | head -20
[ $rc -eq 0 ] || { echo "not correct: no timing"; exit 1; }
timeout 240 python3 tools/bench.py --solver methods/versions/v104/solver.py --solver methods/versions/v132/solver.py \
  --solver methods/versions/v134/solver.py --solver methods/versions/v136/solver.py \
  --no-baseline --json $OUT/bench.json --png $OUT/bench.png > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"; grep -E '^\[|m3_cp_forward|^    v1|geomean' $OUT/bench.log | head -70
timeout 150 python3 tools/selfcheck.py --solver methods/versions/v136/solver.py --json $OUT/selfcheck_v136.json \
  > $OUT/selfcheck_v136.log 2>&1; echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s"; tail -3 $OUT/selfcheck_v136.log
export MAMBA3_JIT_LINEINFO=1 MAMBA3_JIT_CACHE_DIR=/tmp/jc
timeout 60 python3 methods/results/run92/ncu_fwd.py c01 methods/versions/v136/solver.py > /dev/null 2>&1
timeout 120 ncu --set full --import-source yes -k regex:'^m3_cp_forward64$' --launch-skip 1 --launch-count 1 \
  -o /tmp/fwd135 python3 methods/results/run92/ncu_fwd.py c01 methods/versions/v136/solver.py > $OUT/ncu_fwd135.log 2>&1
echo "ncu rc=$? $(( $(date +%s)-t0 ))s"
ncu -i /tmp/fwd135.ncu-rep --page source --print-source cuda,sass --csv > $OUT/fwd135.csv 2>&1
ncu -i /tmp/fwd135.ncu-rep --page details > $OUT/fwd135_details.txt 2>&1
grep -E "Duration|Executed Instructions  |Issue Slots Busy|Achieved Occupancy|Registers Per|Warp Cycles Per Issued" $OUT/fwd135_details.txt | head
