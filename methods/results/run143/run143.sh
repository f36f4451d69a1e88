#!/usr/bin/env bash
# Run 143 (thirtieth session): v212 made the default after run 142 (latency geomean 378.0 against
# v182's 384.5 us, every case faster), and v213-v215 (v210/v211 whose forward kernels take the fast
# sin/cos path for every angle, M3_SINCOS_WIDE: the chunk-64 forward without spills and 6% fewer
# instructions in SASS; their backward v210's and v211's module). In order: on the tree with v212
# the default, its GPU tests (long sequences, training, initial states, validation, tools,
# reference, bind, rejects, current stream); the GPU tests of v213-v215 (bitwise v210/v211 on three
# mixes each, within rounding past 8192 rad, dispatch, waves, forward-only, streams); then the
# bench of v212 and v215 (three interleaved passes, pinned). Cut to that for a short lease (the
# selfcheck of v212's solver ran in run 142).
# Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
source methods/results/default_gpu_tests.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py \
  tests/python/test_streams_graphs_gpu.py -k "v213 or v214 or v215" > $OUT/tests.log 2>&1
echo "tests v213-v215 rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/tests.log)"
grep -E "^FAILED" $OUT/tests.log | head -5
timeout 150 python3 tools/bench.py --solver methods/versions/v212/solver.py --solver methods/versions/v215/solver.py \
  --no-baseline --reps 3 --pin-cpu 3 --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"
python3 methods/results/bench_table.py $OUT/bench.json
