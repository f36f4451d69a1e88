#!/usr/bin/env bash
# Configures and builds mamba3-jit into build/ (the runtime, the tools, the tests and the torch
# operator library). Where spdlog, fmt or Catch2 are not installed, the Debian packages kept in
# third_party/debs are unpacked into build/deps and used instead.
#   tools/build.sh [extra cmake -D options]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${MAMBA3_JIT_BUILD_DIR:-$root/build}"
mkdir -p "$build"

prefix=()
# The headers decide, not the CMake configs: a machine can carry a config without the headers
# this project includes (Catch2 v3 instead of v2, say).
if [ ! -f /usr/include/spdlog/spdlog.h ] || [ ! -f /usr/include/catch2/catch.hpp ]; then
  deps="$build/deps"
  if [ ! -f "$deps/.unpacked" ]; then
    echo "build.sh: spdlog/fmt/Catch2 v2 headers not installed; unpacking third_party/debs into $deps" >&2
    mkdir -p "$deps"
    for f in "$root"/third_party/debs/*.deb; do dpkg -x "$f" "$deps"; done
    touch "$deps/.unpacked"
  fi
  prefix=("-DCMAKE_PREFIX_PATH=$deps/usr;$deps/usr/lib/x86_64-linux-gnu/cmake;$deps/usr/lib/cmake")
fi

generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
# A configure that failed half way leaves a cache but no build files: configure again then.
if [ ! -f "$build/CMakeCache.txt" ] || { [ ! -f "$build/build.ninja" ] && [ ! -f "$build/Makefile" ]; }; then
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DPython3_EXECUTABLE="$(command -v python3)" "${prefix[@]}" "$@"
elif [ $# -gt 0 ]; then
  cmake -S "$root" -B "$build" "$@"
fi
cmake --build "$build" -j "$(nproc)"
