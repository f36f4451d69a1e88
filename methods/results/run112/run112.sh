#!/usr/bin/env bash
# Run 112 (twentieth session): two more selfchecks of the default (v155) in one machine session,
# for the timing rule's two-pass spread (run 103 saw it fail twice on host noise).
# Carry ["scratch", ".deps"]; scratch/shared holds SPEC.md, VJP.md and cases.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
for i in 1 2; do
  timeout 90 python3 tools/selfcheck.py > $OUT/selfcheck_$i.log 2>&1
  echo "selfcheck $i rc=$? $(( $(date +%s)-t0 ))s"; tail -10 $OUT/selfcheck_$i.log
done
