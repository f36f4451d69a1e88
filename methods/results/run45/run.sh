# run 45: v57/v58 (next chunk's inputs prefetched into L2): tests, bench v48 / v52 / v58; selfcheck (main = v52); full suite with v52 the default
set -u
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared PYTHONUNBUFFERED=1 M3_CASES=$PWD/scratch/shared/cases/visible_cases.json
S=$SECONDS
git log --oneline -1 | cut -c1-60
bash tools/build.sh > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
echo "build t=$((SECONDS-S))s"
build/mamba3-jit-warmup --filter 'v47,|v51,|v57,|v8,|m3_reduce' > /tmp/warm.log 2>&1; tail -1 /tmp/warm.log; echo "warm t=$((SECONDS-S))s"
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py tests/python/test_streams_graphs_gpu.py \
  -k "v57 or v58" > $OUT/tests.log 2>&1; rc=$?; echo "tests rc=$rc"; tail -2 $OUT/tests.log; grep -E "^FAILED|Error" $OUT/tests.log | head -12; echo "tests t=$((SECONDS-S))s"
timeout 150 python3 tools/bench.py --solver methods/versions/v48/solver.py --solver methods/versions/v52/solver.py \
  --solver methods/versions/v58/solver.py --json $OUT/bench.json --png $OUT/bench.png > $OUT/bench.log 2>&1; echo "bench rc=$?"; tail -12 $OUT/bench.log; echo "bench t=$((SECONDS-S))s"
grep -E "^\[|v(48|52|58):|m3_cp_(backward|forward)" $OUT/bench.log | head -80 > $OUT/kernels.txt
timeout 120 python3 tools/selfcheck.py --json $OUT/selfcheck_main.json > $OUT/selfcheck_main.log 2>&1; echo "selfcheck rc=$?"; tail -11 $OUT/selfcheck_main.log; echo "selfcheck t=$((SECONDS-S))s"
timeout $((590 - (SECONDS - S))) bash tools/test.sh > $OUT/test.log 2>&1; echo "test.sh rc=$? t=$((SECONDS-S))s"
grep -E "tests passed|passed|failed|reliability|FAILED" $OUT/test.log | tail -8
