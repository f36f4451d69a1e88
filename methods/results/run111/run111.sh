#!/usr/bin/env bash
# Run 111 (twentieth session): v156 = v148 whose chunk-64 forward stores the staged q/k octets'
# halves in an order that meets 32 banks (M3_CP_F64_SWAPPED_QK; the bank model: 512 fewer shared
# wavefronts a job of 64 tokens, half of what those stores took); v157 picks v156's kernels from
# two waves, v154's below (as v155 does with v148's). Prediction: the forward 2 to 4% below v148's
# on c01-c07, c00 unchanged. Correctness first (v156 bitwise v148, dispatch, waves, streams and
# graphs), then the bench of v155 (the default) and v157 in one process, then the shared-store
# counters of both forwards on c01 (ncu).
# Carry ["scratch", ".deps"]; scratch/shared holds SPEC.md, VJP.md and cases.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 120 python3 -m pytest -q tests/python/test_operator_gpu.py tests/python/test_streams_graphs_gpu.py \
  -k "v156 or v157" > $OUT/tests.log 2>&1
rc=$?; echo "tests rc=$rc $(( $(date +%s)-t0 ))s"; grep -E "passed|failed|Error|assert" $OUT/tests.log | head -20
[ $rc -eq 0 ] || { echo "not correct: no timing"; exit 1; }
timeout 150 python3 tools/bench.py --solver methods/versions/v155/solver.py --solver methods/versions/v157/solver.py \
  --no-baseline --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"; grep -E '^\[|m3_cp_forward64|^    v1' $OUT/bench.log | head -50
for v in v148 v156; do
  timeout 40 ncu --metrics gpu__time_duration.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum \
    -k regex:'^m3_cp_forward64$' --launch-skip 1 --launch-count 1 \
    python3 methods/results/run92/ncu_fwd.py c01 methods/versions/$v/solver.py > $OUT/ncu_fwd_$v.txt 2>&1
  echo "ncu $v rc=$? $(( $(date +%s)-t0 ))s"; grep -E "duration|wavefronts|conflicts" $OUT/ncu_fwd_$v.txt
done
