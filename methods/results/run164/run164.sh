#!/usr/bin/env bash
# Run 164 (thirty-seventh session, its end): the hand-off records' dc_pending and K through one
# helper each. The default's SASS differs from run 163's by one FFMA taken out of lane 0's
# predicate (the same instruction and operands), so: the default's GPU suite, the hand-off and
# level tests, and the selfcheck on this commit. Prediction: as run 163 (166 passed, 1 skipped;
# PASS, worst rel-L2 2.09e-3).
# Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
source methods/results/default_gpu_tests.sh
timeout 120 python3 tools/selfcheck.py --json $OUT/selfcheck.json > $OUT/selfcheck.log 2>&1
echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s"
tail -n 10 $OUT/selfcheck.log
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py \
  -k "handoff or (twin and (v246 or v247 or v249 or v250))" > $OUT/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/tests.log)"
grep -E "^FAILED" $OUT/tests.log | head -5
