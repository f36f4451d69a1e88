#!/usr/bin/env bash
# Run 143 (prepared in the thirtieth session, extended in the thirty-first): v212 made the default
# after run 142 (latency geomean 378.0 against v182's 384.5 us, every case faster), v213-v215
# (v210/v211 whose forward kernels take the fast sin/cos path for every angle, M3_SINCOS_WIDE: the
# chunk-64 forward without spills; their backward v210's and v211's module), v216-v218 (v210/v211
# whose MmaTiles read their thread index through a volatile asm, M3_OPAQUE_TILE_TID: the
# backward's spill slots 80 -> 48 bytes) and v219-v221 (v216/v217 with M3_SINCOS_WIDE in every
# kernel: the backward's slots 24 bytes, the forwards without spills) and v222-v224 (v219/v220 with
# every thread-index read of the chunk-parallel kernels opaque: the backward's LDL/STL 6/5). In order: on the tree with
# v212 the default, its GPU tests (long sequences, training, initial states, validation, tools,
# reference, bind, rejects, current stream); the GPU tests of v213-v224 (bitwise v210/v211 on three
# mixes each, within rounding past 8192 rad, dispatch, waves, forward-only, streams); the bench of
# v212, v221 and v224 (three interleaved passes, pinned; v215 and v218 left out for a short
# lease); ncu of c01's backward for v212 and v224.
# Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
source methods/results/default_gpu_tests.sh
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py \
  tests/python/test_streams_graphs_gpu.py -k "v213 or v214 or v215 or v216 or v217 or v218 or v219 or v220 or v221 or v222 or v223 or v224" \
  > $OUT/tests.log 2>&1
echo "tests v213-v224 rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/tests.log)"
grep -E "^FAILED" $OUT/tests.log | head -5
timeout 200 python3 tools/bench.py --solver methods/versions/v212/solver.py --solver methods/versions/v221/solver.py \
  --solver methods/versions/v224/solver.py \
  --no-baseline --reps 3 --pin-cpu 3 --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"
python3 methods/results/bench_table.py $OUT/bench.json
NCU_VARIANTS="v212 v224" source methods/results/ncu_backward_c01.sh
