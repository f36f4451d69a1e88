#!/usr/bin/env bash
# Run 102 (nineteenth session): v142 = v138 whose backward copies the forward's entering state into
# its t1/t2 tiles by cp.async as a job starts (M3_CP_SMEM_STATE), instead of reading it from L2 in
# the update (da) and in dqr's inter product; run 101's ncu put about a tenth of v138's backward
# stall samples on those loads. Correctness first (bitwise twins of v135, dispatch, waves, streams
# and graphs), then the bench of v137 (the default), v139 and v143 in one process, then ncu of
# v142's backward on c01. Carry ["scratch", ".deps"]; scratch/shared holds SPEC.md, VJP.md, cases.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 200 python3 -m pytest -q tests/python/test_operator_gpu.py tests/python/test_streams_graphs_gpu.py \
  -k "v142 or v143" > $OUT/tests.log 2>&1
rc=$?; echo "tests rc=$rc $(( $(date +%s)-t0 ))s"; grep -E "passed|failed|Error|assert" $OUT/tests.log | head -20
[ $rc -eq 0 ] || { echo "not correct: no timing"; exit 1; }
timeout 220 python3 tools/bench.py --solver methods/versions/v137/solver.py --solver methods/versions/v139/solver.py \
  --solver methods/versions/v143/solver.py --no-baseline --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"; grep -E '^\[|m3_cp_backward|^    v1' $OUT/bench.log | head -60
export MAMBA3_JIT_LINEINFO=1 MAMBA3_JIT_CACHE_DIR=/tmp/jc
timeout 60 python3 methods/results/run92/ncu_fwd.py c01 methods/versions/v142/solver.py > /dev/null 2>&1
timeout 90 ncu --set full --import-source yes -k regex:'^m3_cp_backward$' --launch-skip 1 --launch-count 1 \
  -o /tmp/bwd_v142 python3 methods/results/run92/ncu_fwd.py c01 methods/versions/v142/solver.py > /tmp/ncu_bwd_v142.log 2>&1
echo "ncu v142 rc=$? $(( $(date +%s)-t0 ))s"; tail -2 /tmp/ncu_bwd_v142.log
ncu -i /tmp/bwd_v142.ncu-rep --page source --print-source cuda,sass --csv > /tmp/bwd_v142.csv 2>&1
ncu -i /tmp/bwd_v142.ncu-rep --page details > $OUT/bwd_v142_details.txt 2>&1
python3 tools/ncu_lines.py /tmp/bwd_v142.csv --top 40 > $OUT/bwd_v142_lines.txt 2>&1
head -6 $OUT/bwd_v142_lines.txt
grep -E "Duration|Executed Instructions  |L1/TEX Cache Throughput" $OUT/bwd_v142_details.txt | head -4
