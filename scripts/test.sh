#!/usr/bin/env bash
# The test command: installs dependencies, builds (CUDA sources too when nvcc is present), runs the tests, then
# runs them again under AddressSanitizer + UndefinedBehaviorSanitizer (host code, CUDA off).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
BUILD_DIR=build bash scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"
BUILD_DIR=build-asan BUILD_TYPE=RelWithDebInfo bash scripts/build.sh -DMOEX_CUDA=OFF -DMOEX_SANITIZE=address,undefined
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$(nproc)"
