#!/usr/bin/env bash
# Run 160's second call, on the same warm H100 right after run160.sh: the selfcheck of v234 (the
# previous default) and of the default v245, one after the other, so that their solver times
# compare. The baseline's own times moved by up to 34% between the two (c01 32.6 and 24.3 ms),
# so the speedup columns do not compare; the solver columns do. Results in same_process/.
# Carry ["scratch", ".deps"].
source methods/results/prologue.sh >/dev/null 2>&1
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1
timeout 200 python3 tools/selfcheck.py --solver methods/versions/v234/solver.py --json $OUT/selfcheck_v234.json > $OUT/selfcheck_v234.log 2>&1; echo rc=$?
timeout 200 python3 tools/selfcheck.py --json $OUT/selfcheck_v245.json > $OUT/selfcheck_v245.log 2>&1; echo rc=$?
tail -n 10 $OUT/selfcheck_v234.log; tail -n 10 $OUT/selfcheck_v245.log
