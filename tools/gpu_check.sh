#!/usr/bin/env bash
# Everything that needs the GPU, in one pass, for a machine where GPU time is scarce: build,
# the C++ tests, the Python tests (the GPU ones included), the self-check of a solver and a side by
# side bench of solvers. Logs and JSON go to OUT_DIR (default build/gpu-check); a short summary
# is printed last.
#   tools/gpu_check.sh [--solver PATH] [--bench PATH ...]
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${OUT_DIR:-$root/build/gpu-check}"
mkdir -p "$out"
solver=methods/main/solver.py
bench=()
while [ $# -gt 0 ]; do
  case "$1" in
    --solver) solver="$2"; shift 2 ;;
    --bench) bench+=(--solver "$2"); shift 2 ;;
    *) echo "gpu_check.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
export PYTHONUNBUFFERED=1
summary=()
step() {  # name, command...
  local name="$1"; shift
  local t0=$SECONDS
  "$@" > "$out/$name.log" 2>&1
  local rc=$?
  summary+=("$(printf '%-10s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - t0))" "$(tail -n 1 "$out/$name.log")")")
  return $rc
}
step build bash tools/build.sh || { printf '%s\n' "${summary[@]}"; exit 1; }
# Every specialisation compiled in parallel up front, so that no test pays a JIT compile.
step warmup build/mamba3-jit-warmup
step ctest ctest --test-dir build --output-on-failure -j 8
step pytest python3 -m pytest -q -p no:cacheprovider tests/python
step selfcheck python3 tools/selfcheck.py --solver "$solver" --json "$out/selfcheck.json"
if [ ${#bench[@]} -gt 0 ]; then
  step bench python3 tools/bench.py "${bench[@]}" --json "$out/bench.json"
fi
printf '%s\n' "${summary[@]}"
