#!/usr/bin/env bash
# Run 108 (twentieth session): v152 = v148 whose backward reads the successor's state gradient
# through L1 (plain loads, M3_CP_DS_L1) instead of around it (__ldcg): the two state products read
# each word twice (warps laid out 2 x 4), and run 107's profile put 4.5% of v148's executed
# instructions and 3.7% of its stall samples on those loads. Correctness first (bitwise twins of
# v135, dispatch, waves, streams and graphs), then the bench of v149 (the default) and v153 (v152 by
# waves) in one process, then ncu of v152's backward on c01 (its L1 hit rate and L2 sectors).
# Carry ["scratch", ".deps"]; scratch/shared holds SPEC.md, VJP.md and cases.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 150 python3 -m pytest -q tests/python/test_operator_gpu.py tests/python/test_streams_graphs_gpu.py \
  -k "v152 or v153" > $OUT/tests.log 2>&1
rc=$?; echo "tests rc=$rc $(( $(date +%s)-t0 ))s"; grep -E "passed|failed|Error|assert" $OUT/tests.log | head -20
[ $rc -eq 0 ] || { echo "not correct: no timing"; exit 1; }
timeout 200 python3 tools/bench.py --solver methods/versions/v149/solver.py --solver methods/versions/v153/solver.py \
  --no-baseline --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"; grep -E '^\[|m3_cp_backward|^    v1' $OUT/bench.log | head -50
export MAMBA3_JIT_LINEINFO=1 MAMBA3_JIT_CACHE_DIR=/tmp/jc
timeout 60 python3 methods/results/run92/ncu_fwd.py c01 methods/versions/v152/solver.py > /dev/null 2>&1
timeout 100 ncu --set full --import-source yes -k regex:'^m3_cp_backward$' --launch-skip 1 --launch-count 1 \
  -o /tmp/bwd_v152 python3 methods/results/run92/ncu_fwd.py c01 methods/versions/v152/solver.py > /tmp/ncu_bwd_v152.log 2>&1
echo "ncu v152 rc=$? $(( $(date +%s)-t0 ))s"; tail -1 /tmp/ncu_bwd_v152.log
ncu -i /tmp/bwd_v152.ncu-rep --page source --print-source cuda,sass --csv > /tmp/bwd_v152.csv 2>&1
ncu -i /tmp/bwd_v152.ncu-rep --page details > $OUT/bwd_v152_details.txt 2>&1
python3 tools/ncu_lines.py /tmp/bwd_v152.csv --top 40 > $OUT/bwd_v152_lines.txt 2>&1
gzip -c /tmp/bwd_v152.csv > $OUT/bwd_v152.csv.gz
head -5 $OUT/bwd_v152_lines.txt
grep -E "Duration|Executed Instructions  |L1/TEX Hit Rate|L2 Hit Rate|L1/TEX Cache Throughput" $OUT/bwd_v152_details.txt | head -6
