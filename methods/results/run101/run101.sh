#!/usr/bin/env bash
# Run 101 (nineteenth session): the 32-token backward's q/k and v/dy tiles with rows 8 (mod 32)
# floats apart (v138; v140 also flips the q/k tiles' odd rows), predicted from run 100's line
# profile and methods/bank_model/rows8_banks.py at 952 (v138) and 1,208 (v140) fewer shared
# wavefronts a job (of 13,845). Correctness first (bitwise twins of v135, dispatch, waves, streams
# and graphs), then the bench of v137 (the default), v139 and v141 in one process, then ncu of
# v138's and v140's backward on c01 for the wavefronts. Run from the repository root with carry
# ["scratch", ".deps"] and scratch/shared holding SPEC.md, VJP.md and cases.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
for c in c00 c01; do
  MAMBA3_JIT_LOG_LEVEL=debug timeout 60 python3 methods/results/run92/ncu_fwd.py $c methods/versions/v139/solver.py \
    2>&1 | grep -E "waves|occupancy.*backward|rror" | head -4 >> $OUT/debug_calls_v139.log
done
cat $OUT/debug_calls_v139.log
timeout 260 python3 -m pytest -q tests/python/test_operator_gpu.py tests/python/test_streams_graphs_gpu.py \
  -k "v138 or v139 or v140 or v141" > $OUT/tests.log 2>&1
rc=$?; echo "tests rc=$rc $(( $(date +%s)-t0 ))s"; grep -E "passed|failed|Error|assert" $OUT/tests.log | head -20
[ $rc -eq 0 ] || { echo "not correct: no timing"; exit 1; }
timeout 220 python3 tools/bench.py --solver methods/versions/v137/solver.py --solver methods/versions/v139/solver.py \
  --solver methods/versions/v141/solver.py --no-baseline --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"; grep -E '^\[|m3_cp_backward|^    v1|geomean' $OUT/bench.log | head -60
export MAMBA3_JIT_LINEINFO=1 MAMBA3_JIT_CACHE_DIR=/tmp/jc
for v in v138 v140; do
  [ $(( $(date +%s)-t0 )) -gt 520 ] && { echo "no time left for ncu of $v"; break; }
  timeout 60 python3 methods/results/run92/ncu_fwd.py c01 methods/versions/$v/solver.py > /dev/null 2>&1
  timeout 90 ncu --set full --import-source yes -k regex:'^m3_cp_backward$' --launch-skip 1 --launch-count 1 \
    -o /tmp/bwd_$v python3 methods/results/run92/ncu_fwd.py c01 methods/versions/$v/solver.py > $OUT/ncu_bwd_$v.log 2>&1
  echo "ncu $v rc=$? $(( $(date +%s)-t0 ))s"
  ncu -i /tmp/bwd_$v.ncu-rep --page source --print-source cuda,sass --csv > /tmp/bwd_$v.csv 2>&1
  ncu -i /tmp/bwd_$v.ncu-rep --page details > $OUT/bwd_${v}_details.txt 2>&1
  python3 tools/ncu_lines.py /tmp/bwd_$v.csv --top 40 > $OUT/bwd_${v}_lines.txt 2>&1
  head -6 $OUT/bwd_${v}_lines.txt
  grep -E "Duration|Executed Instructions  |L1/TEX Cache Throughput" $OUT/bwd_${v}_details.txt | head -4
done
