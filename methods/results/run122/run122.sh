#!/usr/bin/env bash
# Run 122 (twenty-fourth session, experiment): where the backward's time goes, by ablation. The
# default (v167 over v166's kernels) as it is, and with parts of m3_cp_backward removed at compile
# time (exp122.diff, applied here only; MAMBA3_JIT_EXP_OPTIONS adds the macro to every chunk-
# parallel kernel of the call): NO_PRODUCTS (every tile product returns at once), NO_EPILOGUE
# (backward_token_epilogue skipped), NO_TAIL (backward_token_scalars_parallel skipped), all three.
# Results wrong in the ablated runs: timing only. Per-kernel profile of every visible case, no
# baseline, the timing process pinned. Carry ["scratch", ".deps"].
# As first run (the steps of ablate.sh written out here), its summary read a multi-solver key
# (KeyError) and only 8 of the 13 files under $OUT came back (noprod's and notail's were lost; run
# 123 ran them again); ablate.sh puts the files in one archive and reads the single-solver layout.
set -uo pipefail
bash methods/results/run122/ablate.sh methods/results/run122/exp122.diff run122.tgz \
  "full=" \
  "noprod=-DM3_EXP_NO_PRODUCTS=1" \
  "noepi=-DM3_EXP_NO_EPILOGUE=1" \
  "notail=-DM3_EXP_NO_TAIL=1" \
  "none=-DM3_EXP_NO_PRODUCTS=1 -DM3_EXP_NO_EPILOGUE=1 -DM3_EXP_NO_TAIL=1" \
  "full2="
