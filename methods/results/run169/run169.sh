#!/usr/bin/env bash
# Run 169 (written in the fortieth session, after run 168's script): the HBM bytes each kernel moves
# on c01, by ncu's DRAM counters, for v248, v253 (half states) and v255 (and half partials): the
# traffic model's streams (methods/bank_model/traffic_model.py) checked where they leave the chip.
# The second call of each solver is profiled, its four kernels (angles, chunk-64 forward,
# backward, reduce) one by one, with ncu's cache control off so that each kernel finds L2 as its
# predecessor left it (as in a real call, less the overlap of the reduce with the backward).
# Predictions, c01 (model, MB): the forward writes the states, 150 in v248 and 75 in v253 and v255,
# beside about 110 of inputs and results; the backward reads the states back (the same) and
# writes the per-head rows, 152 in v248 and v253 and 76 in v255, beside about 100 of inputs and
# results; the reduce reads what of the rows left L2 (most of them, by run 75). So DRAM bytes:
# forward64 about 260 -> 185 (v253, v255); backward about 400 -> 325 (v253) -> 250 (v255); reduce
# about 150 (v248, v253) -> 75 (v255). If a stream moves less than predicted, L2 kept it.
# Carry ["scratch", ".deps"] (scratch/shared a copy of ../shared, scratch/jc warmed as run 168's).
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
for v in v248 v253 v255; do
  [ $(( $(date +%s)-t0 )) -lt 480 ] || break
  timeout 120 ncu --cache-control none --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
    -k regex:'^m3_' --launch-skip 4 --launch-count 4 --csv \
    python3 methods/results/run92/ncu_fwd.py c01 methods/versions/$v/solver.py > $OUT/ncu_$v.csv 2> $OUT/ncu_$v.log
  echo "ncu $v rc=$? $(( $(date +%s)-t0 ))s"
  python3 - "$OUT/ncu_$v.csv" "$v" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head, body = rows[0], rows[1:]
k, m, u, val = (head.index(x) for x in ("Kernel Name", "Metric Name", "Metric Unit", "Metric Value"))
for r in body:
    print(sys.argv[2], r[k][:24], r[m], r[val], r[u])
PY
done
echo "done $(( $(date +%s)-t0 ))s"
