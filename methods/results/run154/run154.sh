#!/usr/bin/env bash
# Run 154 (thirty-fifth session): take_ticket64 now loads its ticket row through ticket_row (the
# helper m3_cp_backward's guessed tickets use), one copy of the two loads instead of two. On the
# CPU (cuobjdump compare against f362387): the SASS of every chunk-32 kernel unchanged, the
# chunk-64 forward of v222/v231 (the default's on c01-c07) six lines apart (one index add no
# longer predicated, 4,312 instructions either way), v125's chunk-64 kernels reordered. Results
# must not move: the twins of v231/v232 and v125's tests, the default's GPU suite, the selfcheck.
# Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py -k "v231 or v232 or v125 or v126" \
  > $OUT/tests.log 2>&1
echo "tests v231/v232/v125/v126 rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/tests.log)"
grep -E "^FAILED" $OUT/tests.log | head -5
source methods/results/default_gpu_tests.sh
timeout 200 python3 tools/selfcheck.py --json $OUT/selfcheck.json > $OUT/selfcheck.log 2>&1
echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s"
tail -n 14 $OUT/selfcheck.log
