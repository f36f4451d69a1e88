#!/usr/bin/env bash
# Run 131 (twenty-fifth session): v174-v176 (v171/v172 with the hardware's tanh, exp and gate
# sigmoid, M3_FAST_TRANSCENDENTALS; v176 picks them by waves). Correctness first: their GPU tests
# (the truth on the edge and random mixes, within rounding of v171/v172 and repeatable, dispatch,
# waves, forward-only, streams and graphs); then the bench of v173 beside v176, both through bind,
# three interleaved passes, pinned; then v176's selfcheck. Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py \
  tests/python/test_streams_graphs_gpu.py -k "v174 or v175 or v176" > $OUT/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/tests.log)"
grep -E "FAILED|Error" $OUT/tests.log | head -5
timeout 200 python3 tools/bench.py --solver methods/versions/v173/solver.py --solver methods/versions/v176/solver.py \
  --no-baseline --reps 3 --pin-cpu 3 --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"
timeout 100 python3 tools/selfcheck.py --solver methods/versions/v176/solver.py --json $OUT/selfcheck.json \
  > $OUT/selfcheck.log 2>&1
echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s: $(grep -E 'selfcheck: ' $OUT/selfcheck.log | tail -n 1)"
python3 methods/results/bench_table.py $OUT/bench.json
