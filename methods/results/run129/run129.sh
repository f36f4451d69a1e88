#!/usr/bin/env bash
# Run 129 (twenty-fifth session): first, the default's GPU tests and selfcheck on the commit the
# previous session ended at (not run there: its device time was spent); then v171-v173 (the backward
# takes its job's sequence from the ticket table, M3_CP_BACKWARD_TABLE_JOB): their GPU tests
# (bitwise twins of v168/v169, dispatch, waves, streams), and the bench of v170 beside v173, both
# through bind, three interleaved passes, the timing process pinned. Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/python/test_long_gpu.py tests/python/test_training.py \
  tests/python/test_training_states.py tests/python/test_validation.py tests/python/test_tools.py \
  tests/python/test_reference.py tests/python/test_initial_states_gpu.py tests/python/test_operator_gpu.py \
  -k "(bind or rejects or current_stream or not operator_gpu) and not slow" > $OUT/tests_default.log 2>&1
echo "tests default rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/tests_default.log)"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py \
  tests/python/test_streams_graphs_gpu.py -k "v171 or v172 or v173" > $OUT/tests.log 2>&1
echo "tests v171-v173 rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/tests.log)"
timeout 100 python3 tools/selfcheck.py --json $OUT/selfcheck.json > $OUT/selfcheck.log 2>&1
echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s: $(grep -E 'PASS|FAIL' $OUT/selfcheck.log | tail -n 2)"
timeout 200 python3 tools/bench.py --solver methods/versions/v170/solver.py --solver methods/versions/v173/solver.py \
  --no-baseline --reps 3 --pin-cpu 3 --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"
python3 methods/results/bench_table.py $OUT/bench.json
