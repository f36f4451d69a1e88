#!/usr/bin/env bash
# Run 167 (thirty-ninth session): where the plane cores' products spend their time. Run 166 timed the
# products alone (staged once) at 12.3 us a job for the bf16 chunk-32 core and 13.1 us a job of 64
# tokens for the fp16 chunk-64 core, against about 3.3 us of tensor work at the probe's rate.
# Timing ablations of the probes (M3_CORE_ABLATE, results wrong): the outputs computed but not
# stored; the mixing (scores, dM, G) skipped; the mixing alone. Predictions, chunk-64 fp16 (bf16
# chunk-32): not stored 10 to 11 us (10), no mixing about 10 (9), the mixing alone about 3 (3).
# A second reading, written after run 166 and before this run: both fp16 cores write their outputs
# at about the same aggregate rate (72 KB a job of 32 tokens at 7.8 us, 112 KB a job of 64 at 13.1,
# 264 CTAs: 2.44 and 2.26 TB/s into L2), as if the stores set the time. If so, "not stored" takes
# the chunk-64 fp16 core to 5 to 7 us and the bf16 chunk-32 core to 8 to 10 (its tensor work is
# larger), and the stores are what a real job's design must cut (dq and dk partials, dv, the
# state gradient handed on).
# - The chunk-64 half core with its range guard (M3_CORE64_SCALED, built after run 166): the GPU test
#   runs it at the generator's scale and with v, dy, S and dS 2^16 times larger (within 1e-3 both
#   times; the plain half core at 2^16 must overflow), and the job timing runs it beside the plain
#   one. Prediction: 1 to 2 us a job more than the plain core's 16.9 (three more barriers, the
#   maxima, the A fragments of dqr and dks loaded twice for their column halves).
# Not run in the thirty-ninth session: its device time ran out (written, waiting for a device).
# Carry ["scratch", ".deps"] (scratch/shared: a copy of ../shared; .deps: the C++ dependencies, as the
# prologue says; the fortieth session found this script written without them).
set -uo pipefail
source methods/results/prologue.sh
MAMBA3_JIT_BUILD_DIR=/tmp/bt bash tools/build.sh -DMAMBA3_JIT_BUILD_TORCH=OFF > /tmp/build.log 2>&1
echo "build rc=$? $(( $(date +%s)-t0 ))s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
# Correctness first: the cores, and every operand orientation in half as well (new: predicted about
# 3e-4 each, bound 1e-3).
/tmp/bt/mamba3_jit_tests "the plane product cores match float64*" -s 2>&1 | grep -E "rel-L2|overflow|passed|failed" | tail -n 40
/tmp/bt/mamba3_jit_tests "the plane products match float64*" -s 2>&1 | grep -E "fp16.*rel-L2|passed|failed" | head -14
for i in 1 2; do
  /tmp/bt/mamba3_jit_tests "plane product core: where the products' time goes" 2>&1 | grep -E "us a job" \
    | tee -a $OUT/timing.txt
  /tmp/bt/mamba3_jit_tests "plane product core: time per job" 2>&1 | grep -E "us a job" | tee -a $OUT/timing.txt
done
echo "done $(( $(date +%s)-t0 ))s"
