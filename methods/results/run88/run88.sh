#!/usr/bin/env bash
# Run 88: tile staging by 16-byte ld/st against cp.async.bulk, and wgmma m64n128 / A-in-registers,
# timed and counted by ncu (methods/results/run88/staging_bench.cu).
set -uo pipefail
t0=$(date +%s)
nvcc -O3 -gencode arch=compute_90a,code=sm_90a -I kernel_src -o /tmp/staging_bench methods/results/run88/staging_bench.cu; echo "nvcc rc=$?"
for r in 1 2; do /tmp/staging_bench 2000; echo "rc=$?"; done 2>&1 | tee $OUT/bench.log
M="gpu__time_duration.sum,l1tex__data_pipe_lsu_wavefronts.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts.sum.pct_of_peak_sustained_elapsed,l1tex__data_bank_reads.sum,l1tex__data_bank_writes.sum,lts__t_sectors.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,sm__warps_active.avg.per_cycle_active"
for kname in stage_lsu stage_bulk product_n128 product_rs; do
  timeout 120 ncu --metrics $M -k regex:"^$kname\$" --launch-skip 1 --launch-count 1 /tmp/staging_bench 200 > $OUT/ncu_$kname.log 2>&1
  echo "ncu $kname rc=$? $(( $(date +%s)-t0 ))s"
  grep -E "duration|wavefronts|bank|lts__t_sectors|hmma|inst_executed.sum|warps_active" $OUT/ncu_$kname.log
done
