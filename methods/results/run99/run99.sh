#!/usr/bin/env bash
# Run 99 (eighteenth session): v137 (the default) against v104 once more, in two processes with
# the solvers in opposite orders, because run 97's host noise hid their latency difference.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$?"
a=methods/versions/v104/solver.py; b=methods/versions/v137/solver.py
timeout 100 python3 tools/bench.py --solver $a --solver $b --no-baseline --json $OUT/bench_a.json > $OUT/bench_a.log 2>&1
timeout 100 python3 tools/bench.py --solver $b --solver $a --no-baseline --json $OUT/bench_b.json > $OUT/bench_b.log 2>&1
grep -hE '^\[|^    v1' $OUT/bench_a.log $OUT/bench_b.log
