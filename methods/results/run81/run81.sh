#!/usr/bin/env bash
# Run 81: where the host part of a call goes (v104, the default), cases c00 to c04.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 200 python3 scratch/host_study2.py $OUT c00,c01,c02,c03,c04 > $OUT/host_study.log 2>&1; echo "host rc=$? $(( $(date +%s)-t0 ))s"
grep -E '==|solver|validate' $OUT/host_study.log
