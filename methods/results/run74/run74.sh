#!/usr/bin/env bash
# Run 74: v102 beside v96 again, v102 listed first, with the bench's new busy span and each
# kernel's start and end within a call (where the reduce overlaps the backward).
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
build/mamba3-jit-warmup --config variant=v96,chunk=32,threads=256 --config variant=v102,chunk=32,threads=256 > $OUT/warmup.log 2>&1; echo "warmup rc=$? $(( $(date +%s)-t0 ))s"; tail -1 $OUT/warmup.log
timeout 150 python3 tools/bench.py --solver methods/versions/v102/solver.py --solver methods/versions/v96/solver.py --json $OUT/bench.json --png $OUT/bench.png > $OUT/bench.log 2>&1; echo "bench rc=$? $(( $(date +%s)-t0 ))s"
grep -E "m3_|^\[|v96 |v102 " $OUT/bench.log | head -80
tail -12 $OUT/bench.log
