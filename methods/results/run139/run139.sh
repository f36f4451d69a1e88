#!/usr/bin/env bash
# Run 139 (written in the twenty-seventh session, run in the twenty-eighth: its output is output.txt here; not run at first: the device pool refused every
# start after run 138 until the session's device time was spent): the default (v182) on that
# session's final tree, its GPU tests and the selfcheck, so that the figures come from the code
# that landed (the commits since run 136 add kernel code only behind M3_CP_INTER_PARKED, rejected
# in run 138). Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
source methods/results/default_gpu_tests.sh
timeout 200 python3 tools/selfcheck.py --json $OUT/selfcheck.json > $OUT/selfcheck.log 2>&1
echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s"
tail -n 14 $OUT/selfcheck.log
