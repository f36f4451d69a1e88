#!/usr/bin/env bash
# Run 90: the chain's step latency alone (methods/results/run90/chain_bench.cu), then on the final
# tree: the C++ GPU tests (the wgmma probe) and the selfcheck with the default (v104).
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
nvcc -O3 -gencode arch=compute_90a,code=sm_90a -o /tmp/chain_bench methods/results/run90/chain_bench.cu; echo "nvcc rc=$?"
for r in 1 2; do /tmp/chain_bench; echo "rc=$?"; done 2>&1 | tee $OUT/chain.log
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
build/mamba3_jit_tests "[gpu]" > $OUT/gpu_tests.log 2>&1; echo "gpu tests rc=$? $(( $(date +%s)-t0 ))s"; tail -2 $OUT/gpu_tests.log
timeout 300 python3 tools/selfcheck.py > $OUT/selfcheck.log 2>&1; echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s"; tail -14 $OUT/selfcheck.log
