#!/usr/bin/env bash
# Run 153 (thirty-fourth session): the README's main job on the session's final tree, v234 the
# default (unchanged; m3_schedule's shared core in its angle kernel, bitwise in run 151's tests):
# the build, then `python3 tools/selfcheck.py` through methods/main. (Run 152 was written and
# dropped unrun: the design note's section "A job alone on its SM" says why.)
# Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 200 python3 tools/selfcheck.py --json $OUT/selfcheck.json > $OUT/selfcheck.log 2>&1
echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s"
tail -n 14 $OUT/selfcheck.log
