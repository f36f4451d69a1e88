#!/usr/bin/env bash
# Run 84 (experiment): what the chains cost. v104 as is, against v104 whose flag waits return at
# once (M3_EXP_NO_WAIT: results wrong, timing only), per-kernel profile, every visible case.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 200 python3 tools/bench.py --no-baseline --json $OUT/bench_wait.json > $OUT/bench_wait.log 2>&1; echo "wait rc=$? $(( $(date +%s)-t0 ))s"
MAMBA3_JIT_EXP_OPTIONS="-DM3_EXP_NO_WAIT=1" timeout 200 python3 tools/bench.py --no-baseline --json $OUT/bench_nowait.json > $OUT/bench_nowait.log 2>&1; echo "nowait rc=$? $(( $(date +%s)-t0 ))s"
python3 - $OUT <<'PY'
import json, sys
a = json.load(open(sys.argv[1] + "/bench_wait.json")); b = json.load(open(sys.argv[1] + "/bench_nowait.json"))
for ca, cb in zip(a["cases"], b["cases"]):
    sa = next(iter(ca["solvers"].values())); sb = next(iter(cb["solvers"].values()))
    ka, kb = sa["kernels"], sb["kernels"]
    row = [f"{ca['name']} T={ca['T']:5d} lat {sa['latency_ms']*1e3:7.1f} -> {sb['latency_ms']*1e3:7.1f}"]
    for k in ("m3_cp_forward", "m3_cp_backward", "m3_reduce_all"):
        if k in ka and k in kb:
            row.append(f"{k[3:]} {ka[k]['us_per_iter']:6.1f} -> {kb[k]['us_per_iter']:6.1f}")
    print("  ".join(row))
PY
