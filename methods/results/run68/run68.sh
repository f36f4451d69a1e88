#!/usr/bin/env bash
# Run 68: v97/v98 (persistent CTAs drawing their next ticket late, both kernels) and v99/v100 (the
# forward's only) beside v96; their tests (bitwise twins of v89) and the dispatcher's new reduce
# launch code path.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
build/mamba3-jit-warmup --config variant=v96,chunk=32,threads=256 --config variant=v98,chunk=32,threads=256 --config variant=v100,chunk=32,threads=256 --config variant=v88,chunk=32,threads=256 > $OUT/warmup.log 2>&1; echo "warmup rc=$? $(( $(date +%s)-t0 ))s"; tail -1 $OUT/warmup.log
timeout 120 python3 -m pytest -q -rs tests/python/test_operator_gpu.py tests/python/test_streams_graphs_gpu.py -k "v97 or v98 or v99 or v100" > $OUT/tests.log 2>&1; echo "targeted rc=$? $(( $(date +%s)-t0 ))s"; tail -2 $OUT/tests.log
timeout 120 python3 tools/bench.py --solver methods/versions/v96/solver.py --solver methods/versions/v98/solver.py --solver methods/versions/v100/solver.py --json $OUT/bench.json --png $OUT/bench.png > $OUT/bench.log 2>&1; echo "bench rc=$? $(( $(date +%s)-t0 ))s"
grep -E "m3_cp_backward|m3_cp_forward|^\[" $OUT/bench.log | head -40
tail -13 $OUT/bench.log
