#!/usr/bin/env bash
# Run 123 (twenty-fourth session, experiment): run 122's ablations whose results did not come back
# (NO_PRODUCTS, NO_TAIL), and the skeleton of run 122's "none" without its state traffic
# (NO_STATE_IO: the entering state's copy, the successor's gradient loads and the new gradient's
# stores skipped; the flags still raised). exp123.diff = exp122.diff plus NO_STATE_IO, applied
# here only. Results wrong in the ablated runs: timing only. Carry ["scratch", ".deps"].
# First attempt: exp123.diff lacked NO_STATE_IO's default, so every build without it failed in
# NVRTC (only "nonestate" ran; its JSON is kept as bench_nonestate_first.json); fixed and run again.
set -uo pipefail
bash methods/results/run122/ablate.sh methods/results/run123/exp123.diff run123.tgz \
  "full=" \
  "noprod=-DM3_EXP_NO_PRODUCTS=1" \
  "notail=-DM3_EXP_NO_TAIL=1" \
  "nonestate=-DM3_EXP_NO_PRODUCTS=1 -DM3_EXP_NO_EPILOGUE=1 -DM3_EXP_NO_TAIL=1 -DM3_EXP_NO_STATE_IO=1"
