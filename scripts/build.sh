#!/usr/bin/env bash
# Configures and builds moex into ${BUILD_DIR:-build} (Release). Extra arguments go to cmake, e.g. -DMOEX_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} "$@" >/dev/null
ninja -C "$build" -j "$jobs"
