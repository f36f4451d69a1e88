#!/usr/bin/env bash
# Run 73: v101/v102 (the reduce launched programmatically beside the backward's last wave, each
# chunk's head sums once its heads have counted in) beside v96: their tests (bitwise twins of v89
# and v95), then the bench side by side.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"; tail -3 /tmp/build.log
build/mamba3-jit-warmup --config variant=v96,chunk=32,threads=256 --config variant=v102,chunk=32,threads=256 --config variant=v89,chunk=32,threads=256 > $OUT/warmup.log 2>&1; echo "warmup rc=$? $(( $(date +%s)-t0 ))s"; tail -1 $OUT/warmup.log
timeout 200 python3 -m pytest -q -rs -x tests/python/test_operator_gpu.py tests/python/test_streams_graphs_gpu.py -k "v101 or v102 or overlapped" > $OUT/tests.log 2>&1; echo "targeted rc=$? $(( $(date +%s)-t0 ))s"; tail -4 $OUT/tests.log
timeout 150 python3 tools/bench.py --solver methods/versions/v96/solver.py --solver methods/versions/v102/solver.py --json $OUT/bench.json --png $OUT/bench.png > $OUT/bench.log 2>&1; echo "bench rc=$? $(( $(date +%s)-t0 ))s"
grep -E "m3_cp_backward|m3_reduce|^\[" $OUT/bench.log | head -60
tail -13 $OUT/bench.log
