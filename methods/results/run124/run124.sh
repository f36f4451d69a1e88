#!/usr/bin/env bash
# Run 124 (twenty-fourth session, experiment): the skeleton of run 123 taken apart. On one machine:
# the default as it is; the default without the angles (NO_ANGLES: no tanh, no angle scans, every
# rotation by zero); the skeleton (products, epilogue, tail and state traffic off, as run 123's
# "nonestate"); the skeleton without backward_prepare (NO_PREPARE: no scalars, angles, staging or
# mixing matrix). exp124.diff = exp123.diff plus those two macros, applied here only. Results wrong
# in the ablated runs: timing only. Carry ["scratch", ".deps"].
set -uo pipefail
bash methods/results/run122/ablate.sh methods/results/run124/exp124.diff run124.tgz \
  "full=" \
  "noang=-DM3_EXP_NO_ANGLES=1" \
  "skel=-DM3_EXP_NO_PRODUCTS=1 -DM3_EXP_NO_EPILOGUE=1 -DM3_EXP_NO_TAIL=1 -DM3_EXP_NO_STATE_IO=1" \
  "skelnoprep=-DM3_EXP_NO_PRODUCTS=1 -DM3_EXP_NO_EPILOGUE=1 -DM3_EXP_NO_TAIL=1 -DM3_EXP_NO_STATE_IO=1 -DM3_EXP_NO_PREPARE=1"
