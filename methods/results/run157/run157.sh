#!/usr/bin/env bash
# Run 157 (thirty-sixth session): v240 and v241 are v237 and v238's hand-off carries without
# flags, fences or atomics (M3_CP_HANDOFF_CARRIES=2): m3_cp_angles fills the tail records with an
# unwritten mark (a NaN payload no arithmetic makes), every word is stored once (relaxed) and polled
# until written, and the job before a chunk boundary writes the first token's ddt and dtrap at its
# own end from the other side's half (polled first right after its per-token tail, checked after
# the bias partials). v242 dispatches them as v234 does. Run 156: v239's backward 5 to 9% slower
# than v234's (one fence before warp 0's tail, two acq_rel atomics at each job's end).
# ptxas: the backward 128 registers, 40-byte stack (v231 24), 12 LDL/STL (v231 11), 6,744 static
# instructions (v231 6,088, v237 6,856), two MEMBARs (v231 three: the tail record's release gone).
# Prediction: m3_cp_backward 1 to 3% shorter than v231's (the 4.6% of run 155 less the partials'
# 1.4 k warp instructions a job); if it is not shorter, the partials' instructions cost what the
# chain did and the hand-off carries are worth nothing in today's backward.
# Also the twins of v231/v232 (their source text changed, not their SASS) and v237..v239 again.
# Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py \
  -k "v240 or v241 or v242 or handoff or (twin and (v231 or v232))" > $OUT/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/tests.log)"
grep -E "^FAILED" $OUT/tests.log | head -5
timeout 90 python3 tools/selfcheck.py --no-timing --solver methods/versions/v242/solver.py --json $OUT/selfcheck_v242.json \
  > $OUT/selfcheck_v242.log 2>&1
echo "selfcheck v242 rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/selfcheck_v242.log)"
timeout 240 python3 tools/bench.py --solver methods/versions/v234/solver.py --solver methods/versions/v239/solver.py \
  --solver methods/versions/v242/solver.py --no-baseline --reps 3 --pin-cpu 3 --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"
python3 methods/results/bench_table.py $OUT/bench.json
