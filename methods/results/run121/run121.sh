#!/usr/bin/env bash
# Run 121 (twenty-third session): run 119 again with every timing process pinned to one core (run 120:
# pinned c00 processes 152.7 to 164.3 us, unpinned 161.9 to 180.5): six alternating processes a tree on
# c00 and c06, each 40 calls as the harness times them, host wall and latency medians. No tests.
# Carry ["scratch", ".deps"]; scratch/old.tgz = git archive 7d50d86.
set -uo pipefail
[ -d /tmp/deps ] || for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared MAMBA3_JIT_CACHE_DIR=/tmp/jc
NEW=$PWD OLD=/tmp/old
t0=$(date +%s)
mkdir -p $OLD && tar xzf scratch/old.tgz -C $OLD && cp -r scratch $OLD/
(bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build new rc=$?") &
(cd $OLD && MAMBA3_JIT_BUILD_DIR=$OLD/build bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build_old.log 2>&1; echo "build old rc=$?") &
wait; echo "builds $(( $(date +%s)-t0 ))s"
for i in 1 2 3 4 5 6; do
  for c in c00 c06; do
    for side in old new; do
      dir=$([ $side = old ] && echo $OLD || echo $NEW)
      (cd $dir && timeout 60 taskset -c 3 python3 $NEW/methods/results/run116/stages.py run $dir/methods/versions/v167/solver.py $c) \
        | sed "s/^/$side $i: /" | tee -a $OUT/pairs.txt
    done
  done
done
echo "pairs $(( $(date +%s)-t0 ))s"
python3 - $OUT/pairs.txt <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"(old|new) \d+: (c\d+) .*latency median ([\d.]+) us, host wall of the call median ([\d.]+) us", line)
    if m:
        rows.setdefault((m.group(2), m.group(1)), []).append((float(m.group(3)), float(m.group(4))))
for (case, side), xs in sorted(rows.items()):
    lat = [x[0] for x in xs]; wall = [x[1] for x in xs]
    print(f"{case} {side}: {len(xs)} processes, latency median of medians {statistics.median(lat):.1f} us "
          f"(min {min(lat):.1f}, max {max(lat):.1f}); host wall {statistics.median(wall):.1f} us (min {min(wall):.1f})")
PY
