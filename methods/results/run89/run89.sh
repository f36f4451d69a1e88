#!/usr/bin/env bash
# Run 89: v117 (the forward's entering state by TMA bulk copies) on the device: its GPU tests
# (bitwise v89's), the bench beside v104, and ncu's L1 wavefront count of both forwards on c01.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 200 python3 -m pytest -q -x tests/python/test_operator_gpu.py -k "v117 or v118" > $OUT/tests.log 2>&1; echo "tests rc=$? $(( $(date +%s)-t0 ))s"; tail -2 $OUT/tests.log
timeout 100 python3 -m pytest -q -x tests/python/test_streams_graphs_gpu.py -k "v117" > $OUT/tests_streams.log 2>&1; echo "stream tests rc=$? $(( $(date +%s)-t0 ))s"; tail -1 $OUT/tests_streams.log
timeout 200 python3 tools/bench.py --solver methods/versions/v104/solver.py --solver methods/versions/v118/solver.py \
  --json $OUT/bench.json --png $OUT/bench.png > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"; grep -E '^\[|m3_cp_forward|^    v1|geomean' $OUT/bench.log | head -60
M="gpu__time_duration.sum,l1tex__data_pipe_lsu_wavefronts.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts.sum.pct_of_peak_sustained_elapsed,l1tex__t_output_wavefronts_pipe_lsu_mem_global_op_ld.sum,smsp__inst_executed.sum"
for v in v104 v117; do
  timeout 100 ncu --metrics $M -k regex:m3_cp_forward --launch-skip 1 --launch-count 1 python3 scratch/ncu_fwd.py c01 methods/versions/$v/solver.py > $OUT/ncu_fwd_$v.log 2>&1
  echo "ncu $v rc=$? $(( $(date +%s)-t0 ))s"; grep -E "duration|wavefronts|inst_executed" $OUT/ncu_fwd_$v.log
done
