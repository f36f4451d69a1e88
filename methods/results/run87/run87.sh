#!/usr/bin/env bash
# Run 87: the wgmma building block on the device: the C++ GPU tests (the probe against the
# tf32-truncated product), then one 64 x 64 x 128 tile product by mma.sync with scalar shared
# operand loads and by wgmma from swizzled tiles, timed, and counted by ncu.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
build/mamba3_jit_tests "[gpu]" > $OUT/gpu_tests.log 2>&1; echo "gpu tests rc=$? $(( $(date +%s)-t0 ))s"; tail -2 $OUT/gpu_tests.log
nvcc -O3 -gencode arch=compute_90a,code=sm_90a -I kernel_src -o /tmp/wgmma_bench methods/results/run87/wgmma_bench.cu; echo "nvcc rc=$?"
for r in 1 2; do /tmp/wgmma_bench 4000; done 2>&1 | tee $OUT/bench.log
M="gpu__time_duration.sum,l1tex__data_pipe_lsu_wavefronts.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts.sum.pct_of_peak_sustained_elapsed,sm__inst_executed_pipe_tensor_op_hmma.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,sm__warps_active.avg.per_cycle_active"
for kname in mma_sync_probe m3_wgmma_probe_tf32; do
  timeout 200 ncu --metrics $M -k regex:$kname --launch-skip 1 --launch-count 1 /tmp/wgmma_bench 400 > $OUT/ncu_$kname.log 2>&1
  echo "ncu $kname rc=$? $(( $(date +%s)-t0 ))s"
  grep -E "duration|wavefronts|hmma|gmma|inst_executed.sum|warps_active" $OUT/ncu_$kname.log
done
