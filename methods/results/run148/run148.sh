#!/usr/bin/env bash
# Run 148 (thirty-third session): is the waves picker's rule (the 32-token set below two waves of
# chunk-64 forward jobs, counted by the bound (T / 64 + S) H) right on mixes between c00 and c06?
# The waves model of run 147 (a kernel takes its waves rounded up times a job's latency: the
# chunk-64 forward about 19.5 us a wave, the chunk-32 one about 17.6 on c00) says the 32-token set
# loses wherever its forward needs three or more waves while the chunk-64 one needs two: m1, m2,
# m3 and m5 of methods/results/run148/picker_panel.json (c00 and m4 stay with the 32-token set).
# Bench of v231 (always the wide kernels), v232 (always the 32-token set) and v233 (the default,
# picking) on that panel, three interleaved passes, pinned. Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 300 python3 tools/bench.py --cases methods/results/run148/picker_panel.json \
  --solver methods/versions/v233/solver.py --solver methods/versions/v231/solver.py \
  --solver methods/versions/v232/solver.py --no-baseline --reps 3 --pin-cpu 3 --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"
python3 methods/results/bench_table.py $OUT/bench.json
