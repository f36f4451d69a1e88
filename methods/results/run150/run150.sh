#!/usr/bin/env bash
# Run 150 (prepared in the thirty-third session, not run there: the device did not start): a
# second process for run 147's comparison, the default v234 (v233's kernels on every visible case)
# against v224 on the visible panel, five interleaved passes, pinned. Prediction: v234 about 1.6%
# below v224 again, c01 the least.
# Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 240 python3 tools/bench.py --solver methods/versions/v224/solver.py --solver methods/versions/v234/solver.py \
  --no-baseline --reps 5 --pin-cpu 3 --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"
python3 methods/results/bench_table.py $OUT/bench.json
