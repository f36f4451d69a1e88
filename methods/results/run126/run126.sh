#!/usr/bin/env bash
# Run 126 (twenty-fourth session): v168/v169 (v164/v165 with sincosf's large-angle path out of
# line, M3_SINCOS_OUTLINE) and v170 (them by waves). Correctness first: their GPU tests (bitwise
# twins of v164/v165 on three mixes each, dispatch, waves, forward-only, streams and graphs). Then
# the bench of v167 (v166's kernels) beside v170, both through bind, three interleaved passes, the
# timing process pinned; then the selfcheck of v170's solver. Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py \
  tests/python/test_streams_graphs_gpu.py -k "v168 or v169 or v170" > $OUT/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/tests.log)"
timeout 200 python3 tools/bench.py --solver methods/versions/v167/solver.py --solver methods/versions/v170/solver.py \
  --no-baseline --reps 3 --pin-cpu 3 --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"
timeout 200 python3 tools/selfcheck.py --solver methods/versions/v170/solver.py --json $OUT/selfcheck.json \
  > $OUT/selfcheck.log 2>&1
echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s: $(grep -E 'PASS|FAIL' $OUT/selfcheck.log | tail -n 2)"
python3 - $OUT/bench.json <<'PY'
import json, math, sys
d = json.load(open(sys.argv[1]))
names = d["solvers"]
geo = {n: [] for n in names}
for c in d["cases"]:
    row = [f"{c['name']} T={c['T']:5d}"]
    for n in names:
        s = c["solvers"][n]
        k = s["kernels"]
        geo[n].append(s["latency_ms"])
        f = k.get("m3_cp_forward64", k.get("m3_cp_forward", {})).get("us_per_iter", float("nan"))
        b = k.get("m3_cp_backward", {}).get("us_per_iter", float("nan"))
        row.append(f"{n}: lat {s['latency_ms'] * 1e3:6.1f} fwd {f:6.1f} bwd {b:6.1f}")
    print("  ".join(row))
for n in names:
    print(n, "latency geomean", round(1e3 * math.exp(sum(map(math.log, geo[n])) / len(geo[n])), 1), "us")
PY
