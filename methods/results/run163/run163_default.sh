#!/usr/bin/env bash
# Run 163, second part (thirty-seventh session): the default's (v248's) GPU suite and the selfcheck
# on the current tree, which the thirty-sixth session's last commits (v249 to v251's kernel code,
# off by default) reached without a device run. v246's SASS was verified identical on a machine
# without a GPU. Prediction: as run 162 (166 passed, 1 skipped; PASS, worst rel-L2 2.09e-3, dq).
# Carry ["scratch", ".deps"]; run after run163.sh in the same call.
# Not run as written: its steps ran in one call as run163_all.sh (thirty-seventh session), whose
# output is in this folder.
set -uo pipefail
source methods/results/prologue.sh
source methods/results/default_gpu_tests.sh
timeout 200 python3 tools/selfcheck.py --json $OUT/selfcheck.json > $OUT/selfcheck.log 2>&1
echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s"
tail -n 10 $OUT/selfcheck.log
# Where c00's and c06's host time goes today (run 117's trace was of v167, 24 sessions ago): the
# operator's host stages with the default, 40 calls as the harness makes them.
for c in c00 c06; do
  MAMBA3_JIT_LOG_LEVEL=trace timeout 90 python3 methods/results/run116/stages.py run methods/main/solver.py $c \
    2> /tmp/trace_$c.log
  python3 methods/results/run116/stages.py summarize /tmp/trace_$c.log
done
echo "done $(( $(date +%s)-t0 ))s"
