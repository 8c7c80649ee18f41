#!/usr/bin/env bash
# The test command (what CI runs): installs the dependencies, checks the written rules (format, shellcheck, include
# layering), builds the release preset (CUDA sources too when nvcc is present) and runs its tests, installs the
# Python package with pip and runs its tests, then builds the host code under AddressSanitizer +
# UndefinedBehaviorSanitizer and runs the C++ tests again, and last runs each libFuzzer target over its seed corpus
# for FUZZ_SECONDS (default 20 s each, 5 targets; scripts/fuzz.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/check_style.sh
jobs=${JOBS:-$(nproc)}
if command -v ccache >/dev/null; then  # the Python package's build below recompiles the same sources: cache them
    export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache
fi
cmake --preset release -DMOEX_TESTS=ON >/dev/null
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs"
bash scripts/test_python.sh
cmake --preset asan >/dev/null
cmake --build --preset asan -j "$jobs"
ctest --preset asan -j "$jobs"
bash scripts/fuzz.sh "${FUZZ_SECONDS:-20}"
