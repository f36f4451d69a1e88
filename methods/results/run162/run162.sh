#!/usr/bin/env bash
# Run 162 (thirty-sixth session): v248 the default (methods/results/switch_default.sh v245 v248):
# v246's kernels, or v247's below 1.5 waves of chunk-64 forward jobs, v8's beyond 4096 tokens a
# sequence. Run 161 (an H100): its backward 2.6% shorter than v245's (every case 1.8 to 3.9%), the
# latency geomean 376.8 against v245's 382.4 and v234's 384.4 us. Here the default's GPU suite
# and the selfcheck, the README's main job, then v245's selfcheck on the same machine.
# Prediction: the suite as run 160's (166 passed, 1 skipped); selfcheck PASS, worst rel-L2 2.09e-3
# (dq), every case's solver time at or below v245's.
# Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
source methods/results/default_gpu_tests.sh
timeout 200 python3 tools/selfcheck.py --json $OUT/selfcheck.json > $OUT/selfcheck.log 2>&1
echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s"
tail -n 10 $OUT/selfcheck.log
timeout 200 python3 tools/selfcheck.py --solver methods/versions/v245/solver.py --json $OUT/selfcheck_v245.json \
  > $OUT/selfcheck_v245.log 2>&1
echo "selfcheck v245 rc=$? $(( $(date +%s)-t0 ))s"
tail -n 10 $OUT/selfcheck_v245.log
