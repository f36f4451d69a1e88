#!/usr/bin/env bash
# Run 170 (written in the fortieth session, for after run 168): if run 168 finds v253 or v255 faster
# than v248 and within tolerance, this call makes it the default on the device's copy and runs the
# default's GPU suite and the selfcheck there, as run 162 did for v248:
#   bash methods/results/run170/run170.sh v255      (or v253)
# The same edits then land by `bash methods/results/switch_default.sh v248 NEW` in the commit.
# Prediction: the default's suite as run 164's (166 passed, 1 skipped), the selfcheck PASS with the
# worst rel-L2 within 2e-3 of run 164's 2.09e-3 (dq), the speedups as run 168's bench.
# Carry ["scratch", ".deps"] (scratch/jc warmed for the new default).
set -uo pipefail
new=${1:?usage: run170.sh v253|v255}
source methods/results/prologue.sh
bash methods/results/switch_default.sh v248 "$new"
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
source methods/results/default_gpu_tests.sh
timeout 150 python3 tools/selfcheck.py --json $OUT/selfcheck.json > $OUT/selfcheck.log 2>&1
echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s"
tail -n 12 $OUT/selfcheck.log
echo "done $(( $(date +%s)-t0 ))s"
