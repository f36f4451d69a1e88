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
for c in c00 c01 c00; do
  MAMBA3_JIT_LOG_LEVEL=trace timeout 90 python3 methods/results/run116/stages.py run methods/versions/v167/solver.py $c \
    2> /tmp/trace_$c.log
  python3 methods/results/run116/stages.py summarize /tmp/trace_$c.log
done
echo "done $(( $(date +%s)-t0 ))s"
# v167 (v166's kernels through mamba3_jit.bind) is methods/main's solver on this commit: its selfcheck.
timeout 150 python3 tools/selfcheck.py > $OUT/selfcheck.log 2>&1; echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s"; tail -10 $OUT/selfcheck.log
