#!/usr/bin/env bash
# Run 133 (twenty-fifth session): v177/v178 in their fixed form (the dv pair's roundings spelled
# out as v174's code has them) and v179 as the operator's default and methods/main. Their GPU tests
# (bitwise twins of v174/v175 on three mixes each, the truth on the edge and random mixes,
# dispatch, waves, forward-only, streams and graphs); the default's GPU tests (as run 127's); the
# bench of v176 beside v179 through bind, three interleaved passes, pinned; the selfcheck of
# methods/main. Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py \
  tests/python/test_streams_graphs_gpu.py -k "v177 or v178 or v179" > $OUT/tests.log 2>&1
echo "tests v177-v179 rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/tests.log)"
grep -E "^FAILED" $OUT/tests.log | head -5
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/python/test_long_gpu.py tests/python/test_training.py \
  tests/python/test_training_states.py tests/python/test_validation.py tests/python/test_tools.py \
  tests/python/test_reference.py tests/python/test_initial_states_gpu.py tests/python/test_operator_gpu.py \
  -k "(bind or rejects or current_stream or not operator_gpu) and not slow" > $OUT/tests_default.log 2>&1
echo "tests default rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/tests_default.log)"
grep -E "^FAILED" $OUT/tests_default.log | head -5
timeout 150 python3 tools/bench.py --solver methods/versions/v176/solver.py --solver methods/versions/v179/solver.py \
  --no-baseline --reps 3 --pin-cpu 3 --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"
timeout 100 python3 tools/selfcheck.py --json $OUT/selfcheck.json > $OUT/selfcheck.log 2>&1
echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s: $(grep -E 'selfcheck: ' $OUT/selfcheck.log | tail -n 1)"
python3 methods/results/bench_table.py $OUT/bench.json
