#!/usr/bin/env bash
# Run 82: the host stages of a call (v104), logged by the operator itself.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
MAMBA3_JIT_LOG_LEVEL=trace timeout 200 python3 scratch/host_stages.py c00,c01,c02,c03 > $OUT/stages.log 2>&1; echo "stages rc=$? $(( $(date +%s)-t0 ))s"
grep -v 'kernel\|cache' $OUT/stages.log | sed -e 's/.*host stages (us) of a call with //' | tail -60
