#!/usr/bin/env bash
# Run 151 (thirty-fourth session). Three questions in one lease:
# 1. Is a job alone on its SM faster than one of a pair? v235 and v236 are v231's cubins with the
#    backward (v235) or the chunk-64 forward (v236) launched with 160 KB of dynamic shared memory,
#    one CTA an SM instead of two. If a job's latency held alone (the waves reading of runs 146 and
#    147 inferred so from kernel totals), the padded kernel takes twice v231's time; if the pair
#    contends for the SM (runs 85 and 86: the L1 pipe), less. Prediction: the backward 1.5 to 1.7
#    times v231's (a lone job 15 to 25% shorter), the chunk-64 forward likewise; ncu of both
#    backwards on c01 says how the L1 pipe and issue change.
# 2. m3_schedule and m3_schedule_aligned now share one core (host-tested: the same tables); the
#    angle kernel's SASS changed, its results must not: the twins of v231/v232 and v235/v236, and
#    the default's GPU suite.
# 3. Run 150's question (v234 against v224 on the visible panel, a second process after run 147).
# Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
for v in v231 v235 v236; do
  MAMBA3_JIT_LOG_LEVEL=debug timeout 60 python3 methods/results/run92/ncu_fwd.py c00 methods/versions/$v/solver.py 2>&1 \
    | grep -E "m3_cp_(backward|forward64)\b.*per SM" | sed "s/^.*\] /$v: /" | tee -a $OUT/occupancy.txt
done
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py -k "v231 or v232 or v235 or v236" \
  > $OUT/tests.log 2>&1
echo "tests v231/v232/v235/v236 rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/tests.log)"
grep -E "^FAILED" $OUT/tests.log | head -5
source methods/results/default_gpu_tests.sh
timeout 330 python3 tools/bench.py --solver methods/versions/v224/solver.py --solver methods/versions/v234/solver.py \
  --solver methods/versions/v231/solver.py --solver methods/versions/v235/solver.py \
  --solver methods/versions/v236/solver.py --no-baseline --reps 3 --pin-cpu 3 --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"
python3 methods/results/bench_table.py $OUT/bench.json
NCU_VARIANTS="v231 v235" source methods/results/ncu_backward_c01.sh
