#!/usr/bin/env bash
# Run 132 (twenty-fifth session): v177-v179 (v174/v175 with bf16 results stored in hardware-packed
# pairs, M3_CP_PAIRED_STORES; v179 picks them by waves). Correctness first: their GPU tests
# (bitwise twins of v174/v175 on three mixes each, the truth on the edge and random mixes,
# dispatch, waves, forward-only, streams and graphs); then the bench of v173, v176 and v179, all
# through bind, three interleaved passes, pinned (v176 against v173 a second time, after run 131);
# then v179's selfcheck. Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py \
  tests/python/test_streams_graphs_gpu.py -k "v177 or v178 or v179" > $OUT/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/tests.log)"
grep -E "FAILED|Error" $OUT/tests.log | head -5
timeout 240 python3 tools/bench.py --solver methods/versions/v173/solver.py --solver methods/versions/v176/solver.py \
  --solver methods/versions/v179/solver.py --no-baseline --reps 3 --pin-cpu 3 --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"
timeout 100 python3 tools/selfcheck.py --solver methods/versions/v179/solver.py --json $OUT/selfcheck.json \
  > $OUT/selfcheck.log 2>&1
echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s: $(grep -E 'selfcheck: ' $OUT/selfcheck.log | tail -n 1)"
python3 methods/results/bench_table.py $OUT/bench.json
