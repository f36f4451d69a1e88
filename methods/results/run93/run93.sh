#!/usr/bin/env bash
# Run 93 (prepared in the sixteenth session, not yet run; after run 92 in the same warm machine, or
# alone, since it builds): the chunk-64 backward. v121 is v119 with the q side
# (kernel_src/m3_backward64q.cuh) computing dq and dq_bias beside v103's backward; v123 is v121 with
# the k/v side (kernel_src/m3_backward64kv.cuh) computing dk, dk_bias and dv with its own
# state-gradient chain; v125 is the whole backward in one kernel (kernel_src/m3_backward64.cuh),
# v103's backward gone. Correctness first (the GPU tests: the changed results within rounding,
# every other result bitwise, repeatable, forward only, dispatch, streams and graphs), then only for
# what passed: the bench beside v120 (and v104 through run 92), and ncu's count of the backward
# kernels on c01.
# Needs v119 correct (run 92). Run from the repository root with carry ["scratch", ".deps"] and
# scratch/shared holding SPEC.md, VJP.md and cases.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
# One call each first, with the debug log (occupancy of the new kernels); a hang stops the run here.
for v in v122 v124 v126; do
  MAMBA3_JIT_LOG_LEVEL=debug timeout 60 python3 methods/results/run92/ncu_fwd.py c01 methods/versions/$v/solver.py \
    > $OUT/debug_call_$v.log 2>&1; rc=$?; echo "debug call $v rc=$rc"
  grep -iE "occupancy|backward64|performance loss|error" $OUT/debug_call_$v.log | head -8
  [ $rc -eq 124 ] && { echo "$v hung on c01: stopping"; exit 1; }
done
# Where each variant is wrong, if it is: every gradient per sequence and chunk on a small case.
timeout 90 python3 methods/results/run93/compare_chunks.py v121 v123 v125 > $OUT/compare_chunks.log 2>&1
echo "chunk comparison rc=$? $(( $(date +%s)-t0 ))s"; grep -E "^==" $OUT/compare_chunks.log
# SIDES=0 skips v121's and v123's tests (a second command after a first one that ran them and ran
# out of the device's 600 s): their results are then taken as passed.
if [ "${SIDES:-1}" = 0 ]; then rc121=0; rc123=0; else
timeout 200 python3 -m pytest -q tests/python/test_operator_gpu.py tests/python/test_streams_graphs_gpu.py \
  -k "v121 or v122" > $OUT/tests_v121.log 2>&1
rc121=$?; echo "v121 tests rc=$rc121 $(( $(date +%s)-t0 ))s"; grep -E "passed|failed|Error|assert" $OUT/tests_v121.log | head -20
rc123=1
if [ $rc121 -eq 0 ]; then
  timeout 200 python3 -m pytest -q tests/python/test_operator_gpu.py tests/python/test_streams_graphs_gpu.py \
    -k "v123 or v124" > $OUT/tests_v123.log 2>&1
  rc123=$?; echo "v123 tests rc=$rc123 $(( $(date +%s)-t0 ))s"; grep -E "passed|failed|Error|assert" $OUT/tests_v123.log | head -20
fi
fi
[ $rc121 -eq 0 ] || { echo "v121 is not correct yet: no timing"; exit 1; }
# v125's (the whole backward), after v123's: its sides bitwise v123's, the tail's results within
# rounding of v89's.
rc125=1
if [ $rc123 -eq 0 ]; then
  timeout 200 python3 -m pytest -q tests/python/test_operator_gpu.py tests/python/test_streams_graphs_gpu.py \
    -k "v125 or v126" > $OUT/tests_v125.log 2>&1
  rc125=$?; echo "v125 tests rc=$rc125 $(( $(date +%s)-t0 ))s"; grep -E "passed|failed|Error|assert" $OUT/tests_v125.log | head -20
fi
SOLVERS="--solver methods/versions/v120/solver.py --solver methods/versions/v122/solver.py"
[ $rc123 -eq 0 ] && SOLVERS="$SOLVERS --solver methods/versions/v124/solver.py"
[ $rc125 -eq 0 ] && SOLVERS="$SOLVERS --solver methods/versions/v126/solver.py"
timeout 200 python3 tools/bench.py $SOLVERS --no-baseline --json $OUT/bench.json --png $OUT/bench.png > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"; grep -E '^\[|m3_cp_|^    v1|geomean' $OUT/bench.log | head -80
M="gpu__time_duration.sum,l1tex__data_pipe_lsu_wavefronts.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts.sum.pct_of_peak_sustained_elapsed,l1tex__t_output_wavefronts_pipe_lsu_mem_global_op_ld.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,launch__registers_per_thread,sm__warps_active.avg.per_cycle_active"
# The backward kernels of the second call: v126's one, or v124's three, or v122's two.
if [ $rc125 -eq 0 ]; then BV=v126; BN=1; elif [ $rc123 -eq 0 ]; then BV=v124; BN=3; else BV=v122; BN=2; fi
timeout 120 ncu --metrics $M -k regex:m3_cp_backward --launch-skip $BN --launch-count $BN python3 methods/results/run92/ncu_fwd.py c01 methods/versions/$BV/solver.py > $OUT/ncu_bwd_$BV.log 2>&1
echo "ncu $BV backward kernels rc=$? $(( $(date +%s)-t0 ))s"; grep -E "m3_cp_backward|duration|wavefronts|gmma|inst_executed|registers|warps_active" $OUT/ncu_bwd_$BV.log
