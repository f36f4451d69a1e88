#!/usr/bin/env bash
# Run 85: v111 and v113 (the forward without a state tile, at two and at three CTAs per SM) on the
# device: occupancy lines, their GPU tests, then the bench beside v104.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
MAMBA3_JIT_LOG_LEVEL=debug python3 - > $OUT/occupancy.log 2>&1 <<'PY'
import sys
sys.path.insert(0, "python")
from mamba3_jit import harness as Hn, reference as R
import mamba3_jit
case = Hn.load_cases(name_filter="c00")[0]
args = R.case_args(Hn.draw(case, "cuda"))
for v in ("v104", "v112", "v114", "v116"):
    mamba3_jit.mamba3_siso_varlen_joint_states_full_vjp(*args, config={"variant": v})
PY
grep 'CTAs of' $OUT/occupancy.log | sed -e 's/.*\] //'
timeout 240 python3 -m pytest -q -x tests/python/test_operator_gpu.py -k "v111 or v112 or v113 or v114 or v115 or v116 or row_major" > $OUT/tests.log 2>&1; echo "tests rc=$? $(( $(date +%s)-t0 ))s"; tail -2 $OUT/tests.log
timeout 120 python3 -m pytest -q -x tests/python/test_streams_graphs_gpu.py -k "v111 or v113 or v115" > $OUT/tests_streams.log 2>&1; echo "stream tests rc=$? $(( $(date +%s)-t0 ))s"; tail -1 $OUT/tests_streams.log
timeout 200 python3 tools/bench.py --solver methods/versions/v104/solver.py --solver methods/versions/v112/solver.py \
  --solver methods/versions/v114/solver.py --solver methods/versions/v116/solver.py --json $OUT/bench.json --png $OUT/bench.png > $OUT/bench.log 2>&1
echo "bench rc=$? $(( $(date +%s)-t0 ))s"; grep -E '^\[|m3_cp_(forward|backward)|^    v1|geomean' $OUT/bench.log | head -80
