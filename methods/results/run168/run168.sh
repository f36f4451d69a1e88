#!/usr/bin/env bash
# Run 168 (fortieth session): v252 to v255. v252 is v246 whose chunk-64 forward hands the backward
# its entering states in IEEE half with a power of two a 16 x 64 block (M3_CP_HALF_STATES); v253
# picks v252's kernels or v247's as v248 picks v246's or v247's. Half the states' bytes: 155 MB
# of c01's 310 MB of state traffic through HBM (run 128: the forward's state stores 40 us of its
# 208; run 125: the backward's state traffic 61 us, a part of it these reads). ptxas as v246 (128
# registers both kernels, the backward's 24-byte stack); forward64 4,816 static instructions
# against 4,312 (the final state's fp32 path now apart), the backward 6,416 against 6,464.
# Prediction: m3_cp_forward64 8 to 12% shorter on c01 (189 -> 170 us), the backward 1 to 3% (the
# widening costs a few instructions a thread, the state's 16 KB arrive sooner); c01's latency
# 3 to 4% lower, the geomean 2 to 3%; every gradient within 2e-3 of v246's.
# v254 is v252 whose backward hands the reduce its per-head dq and dk rows in half, a power of two a
# row (M3_CP_HALF_PARTIALS; its reduce M3_REDUCE_HALF_PARTIALS), v255 its picker: half of c01's 152 MB
# of partials written and read back. ptxas: the backward 128 registers, 24-byte stack (LDL 8 / STL 6
# against 6 / 5), 6,968 static instructions against 6,416 (the rows' maxima: four shuffles and a
# scale a row and tensor); the reduce 74 registers against 93.
# Prediction: v255's backward within 1% of v253's (about 100 more instructions a thread against
# half the partials' store instructions and bytes), the reduce's tail after the backward 3 to 5 us
# shorter on c01; latency geomean 0.5 to 1% below v253's; dq and dk within 2e-3 of v252's.
# Then run 167's probes (methods/results/run167/run167.sh, its predictions there) while time lasts; if
# the call's 600 s run out first, run 167's own script is the next call (about 2 minutes).
# Carry ["scratch", ".deps"] (scratch/shared a copy of ../shared, scratch/jc warmed for v248, v253,
# v255: `mamba3-jit-warmup --cache-dir scratch/jc --config variant=v248 --config variant=v253
# --config variant=v255`).
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
timeout 170 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py \
  -k "half_states or half_partials or v252 or v253 or v254 or v255" > $OUT/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/tests.log)"
grep -E "^FAILED|^E  " $OUT/tests.log | head -8
timeout 230 python3 tools/bench.py --solver methods/versions/v248/solver.py --solver methods/versions/v253/solver.py \
  --solver methods/versions/v255/solver.py \
  --no-baseline --reps 4 --pin-cpu 3 --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"
python3 methods/results/bench_table.py $OUT/bench.json --ratios m3_cp_forward64 m3_cp_backward m3_reduce_all
# The selfcheck of the faster picker while the time lasts (the call's limit is 600 s).
for v in v255 v253; do
  left=$(( 560 - ($(date +%s)-t0) ))
  [ $left -gt 60 ] || break
  timeout $left python3 tools/selfcheck.py --solver methods/versions/$v/solver.py --json $OUT/selfcheck_$v.json \
    > $OUT/selfcheck_$v.log 2>&1
  echo "selfcheck $v rc=$? $(( $(date +%s)-t0 ))s"
  tail -n 12 $OUT/selfcheck_$v.log
done
# Run 167's probes (the test binary built above).
B=${MAMBA3_JIT_BUILD_DIR:-build}
for t in "the plane product cores match float64*" "the plane products match float64*"; do
  [ $(( $(date +%s)-t0 )) -lt 480 ] || break
  timeout 60 $B/mamba3_jit_tests "$t" -s 2>&1 | grep -E "rel-L2|overflow|passed|failed" | tail -n 30 | tee -a $OUT/probe_tests.txt
done
for i in 1 2; do
  [ $(( $(date +%s)-t0 )) -lt 520 ] || break
  timeout 40 $B/mamba3_jit_tests "plane product core: where the products' time goes" 2>&1 | grep -E "us a job" | tee -a $OUT/probe_timing.txt
  timeout 30 $B/mamba3_jit_tests "plane product core: time per job" 2>&1 | grep -E "us a job" | tee -a $OUT/probe_timing.txt
done
echo "done $(( $(date +%s)-t0 ))s"
