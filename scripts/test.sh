#!/usr/bin/env bash
# The test command (what CI runs): installs the dependencies, checks the written rules (format, shellcheck, include
# layering), builds the release preset (CUDA sources too when nvcc is present) and runs its tests, then builds the
# host code under AddressSanitizer + UndefinedBehaviorSanitizer and runs the tests again.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/check_style.sh
jobs=${JOBS:-$(nproc)}
cmake --preset release -DMOEX_TESTS=ON >/dev/null
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs"
cmake --preset asan >/dev/null
cmake --build --preset asan -j "$jobs"
ctest --preset asan -j "$jobs"
