# run 44: v51/v52 (entering state prefetched into L2), v53/v54 and v55/v56 (backward in clusters of 4 / 8 heads):
# targeted tests, then bench v44 / v48 / v52 / v54 / v56 side by side
set -u
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared PYTHONUNBUFFERED=1 M3_CASES=$PWD/scratch/shared/cases/visible_cases.json
S=$SECONDS
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
bash tools/build.sh > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
echo "build t=$((SECONDS-S))s"
build/mamba3-jit-warmup --filter 'v43,|v47,|v51,|v53,|v8,|m3_reduce' > /tmp/warm.log 2>&1; tail -1 /tmp/warm.log; echo "warm t=$((SECONDS-S))s"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/python/test_operator_gpu.py tests/python/test_streams_graphs_gpu.py \
  -k "v51 or v52 or v53 or v54 or v55 or v56 or bad_cuda_cu_seqlens" > $OUT/tests.log 2>&1; rc=$?; echo "tests rc=$rc"; tail -3 $OUT/tests.log; grep -E "^FAILED|Error" $OUT/tests.log | head -12; echo "tests t=$((SECONDS-S))s"
timeout 280 python3 tools/bench.py --solver methods/versions/v44/solver.py --solver methods/versions/v48/solver.py \
  --solver methods/versions/v52/solver.py --solver methods/versions/v54/solver.py --solver methods/versions/v56/solver.py \
  --json $OUT/bench.json --png $OUT/bench.png > $OUT/bench.log 2>&1; echo "bench rc=$?"; tail -14 $OUT/bench.log; echo "bench t=$((SECONDS-S))s"
grep -E "^\[|v(44|48|52|54|56):|m3_(cp_backward|reduce)" $OUT/bench.log | head -90
