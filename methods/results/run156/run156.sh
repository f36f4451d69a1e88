#!/usr/bin/env bash
# Run 156 (thirty-sixth session): v237 and v238 are v231 and v232 whose backward takes the angle
# and decay carries from the successor's hand-off (cross(G, S) + K, sum G S, written right after
# the successor's update; flag raised at the start of its tail) instead of the tail record written
# at the successor's very end, and combines the one-token shift at a chunk boundary by whichever
# side arrives second (M3_CP_HANDOFF_CARRIES). v239 dispatches them as v234 does v231/v232.
# Run 155 measured the tail chain at 4.6% of m3_cp_backward (the record dropped, results wrong).
# ptxas: the backward 128 registers, 24-byte stack as v231, 12 LDL/STL against 11, 6,856 static
# instructions against 6,088 (the partials block about 180 a thread: 16 LDS.64, 64 FFMA, 17 SHFL).
# Prediction: m3_cp_backward 2 to 4% shorter than v231's (the chain's 4.6% less the extra work),
# the latency geomean 1 to 2% lower; dangles, dadt, ddt and dtrap within 5e-3 of v231's, the
# worst rel-L2 against the truth as before (2.4e-3, dangles).
# Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py -k "v237 or v238 or v239 or handoff" \
  > $OUT/tests.log 2>&1
echo "tests v237/v238/v239 rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/tests.log)"
grep -E "^FAILED" $OUT/tests.log | head -5
for v in v234 v239; do
  timeout 90 python3 tools/selfcheck.py --no-timing --solver methods/versions/$v/solver.py --json $OUT/selfcheck_$v.json \
    > $OUT/selfcheck_$v.log 2>&1
  echo "selfcheck $v rc=$? $(( $(date +%s)-t0 ))s"
  tail -n 3 $OUT/selfcheck_$v.log
done
timeout 200 python3 tools/bench.py --solver methods/versions/v234/solver.py --solver methods/versions/v239/solver.py \
  --no-baseline --reps 3 --pin-cpu 3 --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"
python3 methods/results/bench_table.py $OUT/bench.json
