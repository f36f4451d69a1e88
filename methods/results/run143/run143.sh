#!/usr/bin/env bash
# Run 143 (thirtieth session): v212 made the default after run 142 (latency geomean 378.0 against
# v182's 384.5 us, every case faster). On the tree with v212 the default: the default's GPU tests
# (long sequences, training, initial states, validation, tools, reference, bind, rejects, current
# stream), the selfcheck of methods/main (v212), and the bench of v182 beside v212 again (three
# interleaved passes, pinned) in a second process.
# Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
source methods/results/default_gpu_tests.sh
timeout 200 python3 tools/selfcheck.py --json $OUT/selfcheck.json > $OUT/selfcheck.log 2>&1
echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/selfcheck.log)"
timeout 240 python3 tools/bench.py --solver methods/versions/v182/solver.py --solver methods/versions/v212/solver.py \
  --no-baseline --reps 3 --pin-cpu 3 --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"
python3 methods/results/bench_table.py $OUT/bench.json
