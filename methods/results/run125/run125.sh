#!/usr/bin/env bash
# Run 125 (twenty-fourth session, experiment): the bare backward job of run 124 ("skelnoprep":
# products, epilogue, tail, state traffic and backward_prepare off) taken apart: without its flag
# waits (NO_WAIT, run 84's), without backward_intra's remains (NO_INTRA), and without both and the
# bias partials (NO_BIAS): what is left is the ticket, the flags raised, the reduce's head count.
# exp125.diff = exp124.diff plus those three macros, applied here only. Results wrong: timing only.
# Carry ["scratch", ".deps"].
set -uo pipefail
bash methods/results/run122/ablate.sh methods/results/run125/exp125.diff run125.tgz \
  "bare=-DM3_EXP_NO_PRODUCTS=1 -DM3_EXP_NO_EPILOGUE=1 -DM3_EXP_NO_TAIL=1 -DM3_EXP_NO_STATE_IO=1 -DM3_EXP_NO_PREPARE=1" \
  "nowait=-DM3_EXP_NO_PRODUCTS=1 -DM3_EXP_NO_EPILOGUE=1 -DM3_EXP_NO_TAIL=1 -DM3_EXP_NO_STATE_IO=1 -DM3_EXP_NO_PREPARE=1 -DM3_EXP_NO_WAIT=1" \
  "nointra=-DM3_EXP_NO_PRODUCTS=1 -DM3_EXP_NO_EPILOGUE=1 -DM3_EXP_NO_TAIL=1 -DM3_EXP_NO_STATE_IO=1 -DM3_EXP_NO_PREPARE=1 -DM3_EXP_NO_INTRA=1" \
  "empty=-DM3_EXP_NO_PRODUCTS=1 -DM3_EXP_NO_EPILOGUE=1 -DM3_EXP_NO_TAIL=1 -DM3_EXP_NO_STATE_IO=1 -DM3_EXP_NO_PREPARE=1 -DM3_EXP_NO_WAIT=1 -DM3_EXP_NO_INTRA=1 -DM3_EXP_NO_BIAS=1"
