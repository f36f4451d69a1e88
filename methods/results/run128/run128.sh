#!/usr/bin/env bash
# Run 128 (twenty-fourth session, experiment): the chunk-64 forward (m3_cp_forward64, v168's: the
# default's on every visible case but c00) taken apart as runs 122 to 125 took the backward:
# without its warpgroup products (NO_WGMMA: every wgmma returns at once), without the state rows it
# writes for the backward (NO_FWD_STATES), and without both plus its chain waits (NO_WAIT) and its
# rotations (NO_ANGLES: sin 0, cos 1; its tanh and angle scans stay). exp128.diff = exp125.diff
# (rebased on v168's sources) plus those two macros, applied here only. Results wrong in the
# ablated runs: timing only. Carry ["scratch", ".deps"].
set -uo pipefail
ABLATE_KERNEL=m3_cp_forward64 bash methods/results/run122/ablate.sh methods/results/run128/exp128.diff run128.tgz \
  "full=" \
  "nowgmma=-DM3_EXP_NO_WGMMA=1" \
  "nostates=-DM3_EXP_NO_FWD_STATES=1" \
  "skeleton=-DM3_EXP_NO_WGMMA=1 -DM3_EXP_NO_FWD_STATES=1 -DM3_EXP_NO_WAIT=1 -DM3_EXP_NO_ANGLES=1"
