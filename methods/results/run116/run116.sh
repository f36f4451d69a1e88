#!/usr/bin/env bash
# Run 116 (twenty-second session): the host path with cu_seqlens read back before the other checks
# and the operator's overload resolved once (this tree), against e168ec3 (scratch/old.tgz): the tests
# of the change, each tree's host stages on c00 and c01, then the bench of both trees in alternating
# processes (old: v166; new: v167 and v166 in one process).
# Carry ["scratch", ".deps"].
set -uo pipefail
[ -d /tmp/deps ] || for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared MAMBA3_JIT_CACHE_DIR=/tmp/jc
NEW=$PWD OLD=/tmp/old
t0=$(date +%s)
mkdir -p $OLD && tar xzf scratch/old.tgz -C $OLD && cp -r scratch $OLD/ && mkdir -p $OLD/methods/results/run116 \
  && cp methods/results/run116/stages.py $OLD/methods/results/run116/
(bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build.log 2>&1; echo "build new rc=$?") &
(cd $OLD && MAMBA3_JIT_BUILD_DIR=$OLD/build bash tools/build.sh -DMAMBA3_JIT_BUILD_TESTS=OFF > /tmp/build_old.log 2>&1; echo "build old rc=$?") &
wait; echo "builds $(( $(date +%s)-t0 ))s"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py tests/python/test_validation.py \
  tests/python/test_long_gpu.py tests/python/test_training.py tests/python/test_training_states.py tests/python/test_tools.py \
  -k "(early_read_back or bind or rejects or not operator_gpu) and not slow" > $OUT/tests.log 2>&1
echo "tests rc=$? $(( $(date +%s)-t0 ))s"; tail -2 $OUT/tests.log
for c in c00 c01; do
  for side in old new; do
    dir=$([ $side = old ] && echo $OLD || echo $NEW); solver=$([ $side = old ] && echo v166 || echo v167)
    (cd $dir && MAMBA3_JIT_LOG_LEVEL=trace timeout 60 python3 methods/results/run116/stages.py run \
      $dir/methods/versions/$solver/solver.py $c 2> /tmp/trace_${side}_$c.log)
    python3 methods/results/run116/stages.py summarize /tmp/trace_${side}_$c.log
  done
done
for i in 1 2 3; do
  (cd $OLD && timeout 100 python3 tools/bench.py --solver methods/versions/v166/solver.py --no-baseline --no-profile \
    --reps 4 --json $OUT/old$i.json > $OUT/old$i.log 2>&1); echo "old $i rc=$? $(( $(date +%s)-t0 ))s"
  timeout 100 python3 tools/bench.py --solver methods/versions/v167/solver.py --solver methods/versions/v166/solver.py \
    --no-baseline --no-profile --reps 2 --json $OUT/new$i.json > $OUT/new$i.log 2>&1; echo "new $i rc=$? $(( $(date +%s)-t0 ))s"
done
python3 - <<'PY'
import json, math, os
out = os.environ["OUT"]
def g(xs): return math.exp(sum(map(math.log, xs)) / len(xs))
for side in ("old", "new"):
    for i in (1, 2, 3):
        d = json.load(open(f"{out}/{side}{i}.json"))
        for s in d["solvers"] if isinstance(d["solvers"], list) else list(d["solvers"]):
            name = s if isinstance(s, str) else s.get("name")
            lat = [c["solvers"][name]["latency_ms"] * 1e3 for c in d["cases"]]
            print(f"{side}{i} {name}: geomean {g(lat):.1f} us; " + " ".join(f"{x:.1f}" for x in lat))
PY
