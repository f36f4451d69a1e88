#!/usr/bin/env bash
# Run 118 (twenty-third session): the kernel registry's questions indexed (7.8 -> 0.5 us a call on the
# development CPU, registry_bench.cpp), against 7d50d86 (scratch/old.tgz = git archive 7d50d86): the
# default's GPU tests on this tree, each tree's host wall and host stages on c00 and c01, then the
# bench of v167 in alternating processes of the two trees. The kernels are the same in both.
# Carry ["scratch", ".deps"].
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
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py tests/python/test_long_gpu.py \
  tests/python/test_validation.py -k "(v166 or v164 or v165 or dispatch or waves or bind or rejects or not operator_gpu) and not slow" \
  > $OUT/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s)-t0 ))s"; tail -2 $OUT/tests.log
for c in c00 c01; do
  for side in old new; do
    dir=$([ $side = old ] && echo $OLD || echo $NEW)
    (cd $dir && timeout 60 python3 $NEW/methods/results/run116/stages.py run $dir/methods/versions/v167/solver.py $c) | sed "s/^/$side untraced: /"
    (cd $dir && MAMBA3_JIT_LOG_LEVEL=trace timeout 60 python3 $NEW/methods/results/run116/stages.py run \
      $dir/methods/versions/v167/solver.py $c 2> /tmp/trace_${side}_$c.log) > /dev/null
    python3 methods/results/run116/stages.py summarize /tmp/trace_${side}_$c.log | sed "s/^/$side traced: /"
  done
done
echo "stages $(( $(date +%s)-t0 ))s"
for i in 1 2 3; do
  for side in old new; do
    dir=$([ $side = old ] && echo $OLD || echo $NEW)
    (cd $dir && timeout 100 python3 tools/bench.py --solver methods/versions/v167/solver.py --no-baseline --no-profile \
      --reps 3 --json $OUT/${side}$i.json > /tmp/${side}$i.log 2>&1); echo "$side $i rc=$? $(( $(date +%s)-t0 ))s"
  done
done
python3 - <<'PY'
import json, math, os
out = os.environ["OUT"]
def g(xs): return math.exp(sum(map(math.log, xs)) / len(xs))
for i in (1, 2, 3):
    for side in ("old", "new"):
        try:
            d = json.load(open(f"{out}/{side}{i}.json"))
        except OSError:
            print(f"{side}{i}: missing"); continue
        lat = [c["latency_ms"] * 1e3 for c in d["cases"]]
        print(f"{side}{i} v167: geomean {g(lat):.1f} us; " + " ".join(f"{x:.1f}" for x in lat))
PY
