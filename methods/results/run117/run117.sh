#!/usr/bin/env bash
# Run 117 (twenty-second session): run 116 put 13.7 us of c00's host time before the first launch
# in its seven allocations (the ten gradient allocations after it take 7.6 us): the same trace with
# the workspace, the output and the final states + dz allocations as stages of their own.
# Carry ["scratch", ".deps"].
set -uo pipefail
[ -d /tmp/deps ] || for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared MAMBA3_JIT_CACHE_DIR=/tmp/jc
t0=$(date +%s)
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
# The GPU tests of the default and of the last session's changes (the early read-back, bind, the
# 'raises before any launch' helper), which had not run on a GPU on the final commit.
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py tests/python/test_validation.py \
  tests/python/test_long_gpu.py tests/python/test_training.py tests/python/test_training_states.py tests/python/test_tools.py \
  tests/python/test_initial_states_gpu.py tests/python/test_reference.py \
  -k "(v166 or early_read_back or bind or rejects or current_stream or not operator_gpu) and not slow" > $OUT/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s)-t0 ))s"; tail -2 $OUT/tests.log
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/python/test_streams_graphs_gpu.py \
  -k "v164 or v165 or jit_inside or memory" > $OUT/tests_streams.log 2>&1
echo "tests streams rc=$? $(( $(date +%s)-t0 ))s"; tail -2 $OUT/tests_streams.log
for c in c00 c01 c00; do
  MAMBA3_JIT_LOG_LEVEL=trace timeout 90 python3 methods/results/run116/stages.py run methods/versions/v167/solver.py $c \
    2> /tmp/trace_$c.log
  python3 methods/results/run116/stages.py summarize /tmp/trace_$c.log
done
echo "done $(( $(date +%s)-t0 ))s"
# v167 (v166's kernels through mamba3_jit.bind) is methods/main's solver on this commit: its selfcheck.
timeout 150 python3 tools/selfcheck.py > $OUT/selfcheck.log 2>&1; echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s"; tail -10 $OUT/selfcheck.log
