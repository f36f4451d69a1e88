#!/usr/bin/env bash
# Run 165 (written in the thirty-eighth session, which was lent no device; not run yet): the bf16-plane
# product block (kernel_src/m3_planes.cuh) and the backward's product core on it
# (kernel_src/m3_planes_core.cuh) on the device.
# - The block's probe computes the backward's update shape (64 x 128 x 32, 8 warps) from hi/lo bf16
#   planes by ldmatrix(.trans) and m16n8k16 in all four operand orientations, beside the default
#   kernels' way (tf32 m16n8k8, operands loaded one element at a time from fp32 tiles).
#   Prediction: every orientation within 2e-5 of float64 (tf32 about 1e-3); per product and CTA
#   pair the planes about 2x faster (SASS: 16 LDSM and 48 HMMA a warp against 72 LDS, 32 FMUL and
#   32 HMMA, plus the split's instructions).
# - The core (one chunk of 32 tokens and one head: Mw, dM, G's sums, dqr, dks, dv and U, staged
#   from fp32 in L2) within 1e-2 of float64 on every output (bf16 operands where one plane is
#   kept). Its time a job at two CTAs an SM against the default backward's nine products with
#   their operand loads, 10.9 us a paired job by run 125's ablation (197 us of c01's backward over
#   4,768 jobs at 264 at once): predicted 3 to 5 us.
# Carry ["scratch"].
set -uo pipefail
t0=$(date +%s)
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared MAMBA3_JIT_CACHE_DIR=/tmp/jc
MAMBA3_JIT_BUILD_DIR=/tmp/bt bash tools/build.sh -DMAMBA3_JIT_BUILD_TORCH=OFF > /tmp/build.log 2>&1
echo "build rc=$? $(( $(date +%s)-t0 ))s"; tail -n 3 /tmp/build.log
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
/tmp/bt/mamba3_jit_tests "the plane products match float64 in every operand orientation*" -s 2>&1 \
  | grep -E "rel-L2|passed|failed|FAILED" | head -20
/tmp/bt/mamba3_jit_tests "the plane product cores match float64*" -s 2>&1 \
  | grep -E "rel-L2|passed|failed|FAILED" | head -10
/tmp/bt/mamba3_jit_tests "[gpu-timing]" 2>&1 | grep -E "ns a product|us a job|passed|failed" | tee $OUT/timing.txt
/tmp/bt/mamba3_jit_tests "[gpu-timing]" 2>&1 | grep -E "ns a product|us a job" | tee -a $OUT/timing.txt
echo "done $(( $(date +%s)-t0 ))s"
