#!/usr/bin/env bash
# Run 158 (thirty-sixth session): v243 and v244 are v240 and v241 whose hand-off sums (cross(G, S)
# and sum G S) are formed in the update loop from the registers it already holds (G as it is
# formed, S as loaded for part), then reduced after the publish by a butterfly over the eight row
# lanes of a column and a transposed butterfly for the four angle sums (M3_CP_HANDOFF_CARRIES=3).
# v245 dispatches them as v234 does. Run 157: v240's backward level with v231's; its partials read
# S a second time (16 LDS.64 a thread) and shuffled 17 times, in a kernel bound by the L1 pipe
# that shared loads and shuffles share (design note, "Fewer instructions, not less time").
# ptxas: 128 registers, 32-byte stack, 11 LDL/STL (v231 24 and 11), 6,696 static instructions,
# LDS.64 40 (v231 41, v240 56). The 64 FFMA a thread now come before the publish, on the chain.
# Prediction: m3_cp_backward 2 to 4% shorter than v231's (the chain's 4.6% less 64 FFMA and 7
# shuffles a thread), the latency geomean 1 to 2.5% lower than v234's.
# Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py \
  -k "v243 or v244 or v245 or handoff" > $OUT/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/tests.log)"
grep -E "^FAILED" $OUT/tests.log | head -5
timeout 90 python3 tools/selfcheck.py --no-timing --solver methods/versions/v245/solver.py --json $OUT/selfcheck_v245.json \
  > $OUT/selfcheck_v245.log 2>&1
echo "selfcheck v245 rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/selfcheck_v245.log)"
timeout 300 python3 tools/bench.py --solver methods/versions/v234/solver.py --solver methods/versions/v242/solver.py \
  --solver methods/versions/v245/solver.py --no-baseline --reps 4 --pin-cpu 3 --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"
python3 methods/results/bench_table.py $OUT/bench.json
