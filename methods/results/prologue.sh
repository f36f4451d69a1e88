# Sourced by the device run scripts (runs 122 on), from the repository root of the device's copy:
# the C++ dependencies unpacked from .deps (the device reaches no network), the shared folder from
# scratch/ (carry ["scratch", ".deps"]), a kernel cache of the run's own, and t0 for the timings.
# The cache starts from scratch/jc when there is one: the warm-up tool fills it on a machine without
# a GPU (`mamba3-jit-warmup --cache-dir scratch/jc --config variant=vN ...`), so that a short device
# lease spends no time in NVRTC; entries whose key differs there are compiled again as usual.
[ -d /tmp/deps ] || for f in .deps/*.deb; do dpkg -x $f /tmp/deps; done
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:${CMAKE_PREFIX_PATH:-}
export MAMBA3_JIT_SHARED_DIR=$PWD/scratch/shared MAMBA3_JIT_CACHE_DIR=/tmp/jc
if [ -d scratch/jc ]; then mkdir -p /tmp/jc && cp -r scratch/jc/. /tmp/jc/; fi
t0=$(date +%s)
