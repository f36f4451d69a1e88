#!/usr/bin/env bash
# Run 120 (twenty-third session): the selfcheck of methods/main's solver on this commit (the registry
# indexed), then whether pinning the timing process to one core narrows the host's process-to-process
# spread that hid run 119's comparison (host wall 50 to 150 us for one call): c00, five processes
# unpinned and five pinned (taskset -c 3), alternating, the same tree.
# Carry ["scratch", ".deps"].
set -uo pipefail
[ -d /tmp/deps ] || for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared MAMBA3_JIT_CACHE_DIR=/tmp/jc
t0=$(date +%s)
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 170 python3 tools/selfcheck.py > $OUT/selfcheck.log 2>&1; echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s"; tail -10 $OUT/selfcheck.log
nproc; grep -m1 "model name" /proc/cpuinfo
for i in 1 2 3 4 5; do
  timeout 60 python3 methods/results/run116/stages.py run methods/versions/v167/solver.py c00 | sed "s/^/unpinned $i: /" | tee -a $OUT/pin.txt
  timeout 60 taskset -c 3 python3 methods/results/run116/stages.py run methods/versions/v167/solver.py c00 | sed "s/^/pinned $i: /" | tee -a $OUT/pin.txt
done
echo "done $(( $(date +%s)-t0 ))s"
