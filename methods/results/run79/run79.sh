#!/usr/bin/env bash
# Run 79: v109/v110 (the backward launched programmatically beside the forward's last jobs, each job
# waiting for its entering state's forward flag) beside v104: their tests (bitwise twins of v89
# and v95, H = 1, 5, 32, 40), then the bench side by side.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
build/mamba3-jit-warmup --config variant=v104,chunk=32,threads=256 --config variant=v110,chunk=32,threads=256 --config variant=v89,chunk=32,threads=256 --config variant=v95,chunk=32,threads=256 > $OUT/warmup.log 2>&1; echo "warmup rc=$? $(( $(date +%s)-t0 ))s"; tail -1 $OUT/warmup.log
timeout 200 python3 -m pytest -q -rs -x tests/python/test_operator_gpu.py tests/python/test_streams_graphs_gpu.py -k "v109 or v110 or overlapped" > $OUT/tests.log 2>&1; echo "targeted rc=$? $(( $(date +%s)-t0 ))s"; tail -3 $OUT/tests.log
timeout 150 python3 tools/bench.py --solver methods/versions/v104/solver.py --solver methods/versions/v110/solver.py --json $OUT/bench.json --png $OUT/bench.png > $OUT/bench.log 2>&1; echo "bench rc=$? $(( $(date +%s)-t0 ))s"
python3 - $OUT/bench.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for c in d["cases"]:
    row = [c["name"]]
    for s, r in c["solvers"].items():
        k = r["kernels"]
        row.append(f"{s}: lat {r['latency_ms']*1e3:.1f} span {r['kernel_ms']*1e3:.1f} fwd {k['m3_cp_forward']['start_us']:.1f}..{k['m3_cp_forward']['end_us']:.1f} bwd {k['m3_cp_backward']['start_us']:.1f}..{k['m3_cp_backward']['end_us']:.1f} red-end {k['m3_reduce_all']['end_us']:.1f}")
    print(" | ".join(row))
PY
tail -3 $OUT/bench.log
