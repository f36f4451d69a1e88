# Sourced by the device run scripts (runs 122 on), from the repository root of the device's copy:
# the C++ dependencies unpacked from .deps (the device reaches no network), the shared folder from
# scratch/ (carry ["scratch", ".deps"]), a kernel cache of the run's own, and t0 for the timings.
[ -d /tmp/deps ] || for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared MAMBA3_JIT_CACHE_DIR=/tmp/jc
t0=$(date +%s)
