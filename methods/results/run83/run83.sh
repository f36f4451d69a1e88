#!/usr/bin/env bash
# Run 83: host-path experiments side by side (MAMBA3_JIT_HOSTEXP: 1 driver-API read-back, 2 output
# and dz allocated after the angle launch, 4 a persistent workspace), alternating processes.
set -uo pipefail
for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared
t0=$(date +%s)
bash tools/build.sh > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
for round in 1 2; do
  for e in 0 1 2 4 7; do
    MAMBA3_JIT_HOSTEXP=$e timeout 100 python3 scratch/host_lat.py c00,c02,c06,c01 >> $OUT/lat.log 2>&1
  done
done
echo "lat done $(( $(date +%s)-t0 ))s"
for e in 0 7; do
  MAMBA3_JIT_HOSTEXP=$e MAMBA3_JIT_LOG_LEVEL=trace timeout 100 python3 scratch/host_stages.py c00,c01 > $OUT/stages_$e.log 2>&1
done
echo "stages done $(( $(date +%s)-t0 ))s"
sort -k2,2 -k1,1 $OUT/lat.log | grep exp=
for e in 0 7; do grep -v 'kernel\|cache' $OUT/stages_$e.log | sed -e 's/.*host stages (us) of a call with //' | tail -4; done
