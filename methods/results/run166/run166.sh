#!/usr/bin/env bash
# Run 166 (thirty-ninth session): the planes core's 20 us a job (run 165) split into its staging and
# its products; its staging made to issue its loads together; and the planes in IEEE half.
# - m3_planes_core_probe with products_only (staged once; the products, the G sums and the stores
#   repeated). Prediction: bf16 pairs 4 to 6 us a job at two CTAs an SM (1,952 HMMA a job at run
#   165's tensor rate is about 3.3 us of the pair's time, plus the barriers and the stores).
# - The whole job with the staging rewritten (RowsInFlight: a thread's float4 of a tile loaded
#   together, then split; two rounds for qr, ks, v, dy and S, dS's loads leaving before the
#   barrier that frees S; run 165's version waited for each float4 in turn, 28 round trips a
#   thread). Prediction: 7 to 10 us a job, from 20.
# - fp16 planes (M3_PLANES_FP16: one plane an operand, every product one m16n8k16 a piece; the
#   precision study has it level with tf32 rounded to nearest on every visible case). SASS: 216
#   HMMA against 552 (both loops), 1,992 instructions against 3,080. Predictions: the core's outputs
#   within 1e-3 of float64; the products about 2 to 3 us a job; the transposed probe product about
#   215 ns (half of tf32's 421: the same tensor ceiling at half the work).
# - The chunk-64 core on fp16 planes (m3_planes_core64.cuh, 109,824 bytes, two CTAs an SM; about
#   1,950 HMMA a job of 64 tokens, as many as the bf16 core's job of 32). Predictions: within 1e-3;
#   products 4 to 6 us a job of 64 tokens; the whole job 8 to 12 us (160 KB of fp32 staged a job).
# Carry ["scratch"] (scratch/shared: a copy of ../shared; scratch/core_cdabd65.cuh: that commit's core header).
set -uo pipefail
t0=$(date +%s)
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared MAMBA3_JIT_CACHE_DIR=/tmp/jc
MAMBA3_JIT_BUILD_DIR=/tmp/bt bash tools/build.sh -DMAMBA3_JIT_BUILD_TORCH=OFF > /tmp/build.log 2>&1
echo "build rc=$? $(( $(date +%s)-t0 ))s"; tail -n 2 /tmp/build.log
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
# (a name, not a list: Catch2 reads commas as separate test specs)
/tmp/bt/mamba3_jit_tests "the plane product cores match float64*" -s 2>&1 \
  | grep -E "rel-L2|passed|failed|FAILED" | head -24
/tmp/bt/mamba3_jit_tests "plane products: time per product" 2>&1 | grep -E "ns a product" | tee -a $OUT/timing.txt
# The predecessor (cdabd65's core header: the same probe, serial staging) built beside it, timed
# alternately with it (its build times the bf16 pairs only: the fp16 sources need this tree's
# staging helpers and fail to compile there, which ends its timing test after the first line).
cp kernel_src/m3_planes_core.cuh /tmp/core_new.cuh
cp scratch/core_cdabd65.cuh kernel_src/m3_planes_core.cuh  # git show cdabd65:kernel_src/m3_planes_core.cuh
MAMBA3_JIT_BUILD_DIR=/tmp/bt_old bash tools/build.sh -DMAMBA3_JIT_BUILD_TORCH=OFF > /tmp/build_old.log 2>&1
echo "old build rc=$?"
cp /tmp/core_new.cuh kernel_src/m3_planes_core.cuh
for i in 1 2; do
  for b in bt bt_old; do
    MAMBA3_JIT_CACHE_DIR=/tmp/jc_$b /tmp/$b/mamba3_jit_tests "plane product core: time per job" 2>&1 \
      | grep -E "us a job" | sed "s/^/$b: /" | tee -a $OUT/timing.txt
  done
done
echo "done $(( $(date +%s)-t0 ))s"
