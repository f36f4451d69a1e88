#!/usr/bin/env bash
# Run 92 (prepared in the fifteenth session, not yet run): v119, the chunk-64 forward on warpgroup
# products (kernel_src/m3_forward64.cuh). Correctness first (v119/v120 GPU tests: the float64
# truth on the edge mixes and the small vectors, within rounding of v89 and repeatable, forward
# only, streams and graphs), then only if they pass: the bench beside v104 and ncu's count of
# both forwards on c01 (duration, L1 wavefronts, tensor pipe). Run from the repository root with
# carry ["scratch", ".deps"] and scratch/shared holding SPEC.md, VJP.md and cases.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
# A small case first, against the CPU model: a hang (a flag never raised) stops the run here.
timeout 90 python3 methods/results/run92/compare_model.py > $OUT/compare_model.log 2>&1; rc=$?
echo "model comparison rc=$rc $(( $(date +%s)-t0 ))s"; grep -E "final_ssm|WRONG|Error" $OUT/compare_model.log | head -12
[ $rc -eq 124 ] && { echo "v119 hung on the small case: stopping"; exit 1; }
MAMBA3_JIT_LOG_LEVEL=debug timeout 120 python3 methods/results/run92/ncu_fwd.py c01 methods/versions/v120/solver.py \
  > $OUT/debug_call.log 2>&1; echo "debug call rc=$?"; grep -iE "occupancy|forward64|performance loss|error" $OUT/debug_call.log | head -8
timeout 240 python3 -m pytest -q tests/python/test_operator_gpu.py -k "v119 or v120" > $OUT/tests.log 2>&1
rc=$?; echo "tests rc=$rc $(( $(date +%s)-t0 ))s"; grep -E "passed|failed|Error|assert" $OUT/tests.log | head -20
timeout 100 python3 -m pytest -q tests/python/test_streams_graphs_gpu.py -k "v119" > $OUT/tests_streams.log 2>&1
echo "stream tests rc=$? $(( $(date +%s)-t0 ))s"; tail -1 $OUT/tests_streams.log
[ $rc -eq 0 ] || { echo "v119 is not correct yet: no timing"; exit 1; }
timeout 240 python3 tools/bench.py --solver methods/versions/v104/solver.py --solver methods/versions/v120/solver.py \
  --json $OUT/bench.json --png $OUT/bench.png > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"; grep -E '^\[|m3_cp_forward|^    v1|geomean' $OUT/bench.log | head -60
M="gpu__time_duration.sum,l1tex__data_pipe_lsu_wavefronts.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts.sum.pct_of_peak_sustained_elapsed,l1tex__t_output_wavefronts_pipe_lsu_mem_global_op_ld.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,launch__registers_per_thread,sm__warps_active.avg.per_cycle_active"
for v in v104 v120; do
  timeout 100 ncu --metrics $M -k regex:m3_cp_forward --launch-skip 1 --launch-count 1 python3 methods/results/run92/ncu_fwd.py c01 methods/versions/$v/solver.py > $OUT/ncu_fwd_$v.log 2>&1
  echo "ncu $v rc=$? $(( $(date +%s)-t0 ))s"; grep -E "m3_cp_forward|duration|wavefronts|gmma|inst_executed|registers|warps_active" $OUT/ncu_fwd_$v.log
done
