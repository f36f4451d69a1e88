#!/usr/bin/env bash
# Run 134 (twenty-fifth session): the default (v179) on the session's final kernels, on whichever
# card the device gives: the selfcheck of the visible panel (methods/main) and the bench of v179
# alone (latency, kernel times, host overhead; two passes, pinned). Carry ["scratch", ".deps"].
set -uo pipefail
source methods/results/prologue.sh
nvidia-smi --query-gpu=name --format=csv,noheader
bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 120 python3 tools/selfcheck.py --json $OUT/selfcheck.json > $OUT/selfcheck.log 2>&1
echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s"; tail -n 10 $OUT/selfcheck.log
timeout 150 python3 tools/bench.py --solver methods/main/solver.py --no-baseline --reps 2 --pin-cpu 3 \
  --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"
python3 - $OUT/bench.json <<'PY'
import json, math, sys
d = json.load(open(sys.argv[1]))
cases = d["cases"] if isinstance(d, dict) else d
lat = []
for c in cases:
    k = {n: v["us_per_iter"] for n, v in c["kernels"].items()}
    lat.append(c["latency_ms"])
    print(c["name"], c["T"], "lat %.1f span %.1f host %.1f" % (c["latency_ms"] * 1e3, c["kernel_ms"] * 1e3,
          c["host_overhead_ms"] * 1e3), " ".join("%s %.1f" % (n[:16], v) for n, v in k.items()))
print("latency geomean %.1f us" % (1e3 * math.exp(sum(map(math.log, lat)) / len(lat))))
PY
