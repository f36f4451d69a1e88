#!/usr/bin/env bash
# The first GPU run of the pending patches, in one pass of under 10 minutes:
# apply both patches to this copy of the tree, build, warm the cache, run the new GPU tests
# under timeouts (a hang would point at v10's flags), then bench v9, v10 and v11 side by side.
# Logs go to OUT_DIR (default build/pending-run).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
out="${OUT_DIR:-$root/build/pending-run}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
git apply methods/pending/forward-only-and-optional-cotangents.patch &&
  git apply methods/pending/v10-chunk-parallel.patch || { echo "patches do not apply"; exit 1; }
bash tools/build.sh > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
build/mamba3-jit-warmup > "$out/warmup.log" 2>&1; tail -1 "$out/warmup.log"
run() {  # name, timeout in s, command...
  local name="$1" limit="$2"; shift 2
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  echo "$name: rc=$? $(tail -n 1 "$out/$name.log")"
}
run v10-small 120 python3 -m pytest -x -q -p no:cacheprovider tests/python/test_operator_gpu.py \
  -k "vectors_small and (v10 or v11)"
run forward-only 120 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py \
  tests/python/test_initial_states_gpu.py -k "forward_only"
run v10-all 240 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py \
  tests/python/test_streams_graphs_gpu.py -k "v10 or v11"
run bench 240 python3 tools/bench.py --no-profile --solver methods/versions/v9/solver.py \
  --solver methods/versions/v10/solver.py --solver methods/versions/v11/solver.py --json "$out/bench.json"
