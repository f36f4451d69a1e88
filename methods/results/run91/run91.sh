#!/usr/bin/env bash
# Runs 90 and 91 (prepared in the fourteenth session, not yet run): the chain's step latency alone,
# then the chunk-64 state chain on wgmma with the state in registers (checked, then timed); then the
# C++ GPU tests and the selfcheck on the tree.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
nvcc -O3 -gencode arch=compute_90a,code=sm_90a -o /tmp/chain_bench methods/results/run90/chain_bench.cu; echo "nvcc rc=$?"
nvcc -O3 -gencode arch=compute_90a,code=sm_90a -I kernel_src -o /tmp/state_chain_bench methods/results/run91/state_chain_bench.cu; echo "nvcc rc=$?"
for r in 1 2; do /tmp/chain_bench; echo "rc=$?"; done 2>&1 | tee $OUT/chain.log
for r in 1 2; do /tmp/state_chain_bench; echo "rc=$?"; done 2>&1 | tee $OUT/state_chain.log
# ncu on the chained 160 x 15 launch (the third: the check, then the first shape's no-wait trial)
M="gpu__time_duration.sum,l1tex__data_pipe_lsu_wavefronts.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts.sum.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,launch__grid_size"
timeout 120 ncu --metrics $M -k regex:state_chain --launch-skip 2 --launch-count 1 /tmp/state_chain_bench > $OUT/ncu_state_chain.log 2>&1
echo "ncu rc=$?"; grep -E "duration|wavefronts|hmma|inst_executed|grid_size" $OUT/ncu_state_chain.log
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
build/mamba3_jit_tests "[gpu]" > $OUT/gpu_tests.log 2>&1; echo "gpu tests rc=$? $(( $(date +%s)-t0 ))s"; tail -2 $OUT/gpu_tests.log
timeout 300 python3 tools/selfcheck.py > $OUT/selfcheck.log 2>&1; echo "selfcheck rc=$? $(( $(date +%s)-t0 ))s"; tail -14 $OUT/selfcheck.log
