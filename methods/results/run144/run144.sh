#!/usr/bin/env bash
# Run 144 (thirty-second session, on run 143's machine at once, with its tree): a second process
# of the bench, v212 beside v224 (run 143's winner) and v215 and v218, which run 143 left out.
# Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 200 python3 tools/bench.py --solver methods/versions/v212/solver.py --solver methods/versions/v224/solver.py \
  --solver methods/versions/v215/solver.py --solver methods/versions/v218/solver.py \
  --no-baseline --reps 3 --pin-cpu 3 --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"
python3 methods/results/bench_table.py $OUT/bench.json
