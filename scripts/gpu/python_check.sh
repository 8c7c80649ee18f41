#!/usr/bin/env bash
# The Python package on the GPU machine in one call: `pip install --no-build-isolation .` into the image's Python
# (no network there; scikit-build-core, nanobind, torch and transformers are installed; the C++ dependencies come
# from .deps), pytest over tests/python (CUDA included), then bench/python_bench.py. Logs and JSON go to $OUT.
# Usage: bash scripts/gpu/python_check.sh [--steps install,test,bench]   Env: OUT, BENCH_ARGS, JOBS (16)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
STEPS=install,test,bench
[[ "${1:-}" == "--steps" ]] && STEPS=${2:?}
OUT=${OUT:-$ROOT/build-gpu/python-check}
BUDGET_S=${BUDGET_S:-560}
# shellcheck source=scripts/gpu/lib.sh
source "$ROOT/scripts/gpu/lib.sh"
want() { [[ ",$STEPS," == *",$1,"* ]]; }
finish() {
    [[ -s "$OUT/pytest_tail.txt" ]] && { echo "---- pytest ----"; cat "$OUT/pytest_tail.txt"; }
    [[ -s "$OUT/pybench_table.txt" ]] && { echo "---- python_bench (µs) ----"; cat "$OUT/pybench_table.txt"; }
    echo "================ moex python_check summary ($(($(date +%s) - START))s; logs in $OUT) ================"
    cat "$SUMMARY"
}
trap finish EXIT
py=${PYTHON:-python3}

if want install; then
    mapfile -t deps < <(deps_cmake_args)
    deps+=("-DCMAKE_CUDA_COMPILER=$(command -v nvcc)")
    SKBUILD_CMAKE_ARGS=$(IFS=';'; echo "${deps[*]}")
    export SKBUILD_CMAKE_ARGS CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-16}
    if box install 400 "$OUT/pip.log" "$py" -m pip install --no-build-isolation --no-deps --force-reinstall .; then
        record install OK "$("$py" -c 'import moex_experts as m, torch, transformers; print("moex_experts", m.__version__, "cuda", m.with_cuda, "torch", torch.__version__, "transformers", transformers.__version__)' 2>&1 | tail -1)"
    else
        fail_step install "$(grep -m3 -iE 'error' "$OUT/pip.log" | tr '\n' ' ' | cut -c1-300)"
    fi
fi
if want test; then
    (cd tests/python && box test 300 "$OUT/pytest.log" "$py" -m pytest -q -p no:cacheprovider -rs .)
    rc=$?
    grep -E '^(FAILED|ERROR)|passed|failed' "$OUT/pytest.log" | tail -12 >"$OUT/pytest_tail.txt"
    if ((rc == 0)); then record test PASS "$(tail -1 "$OUT/pytest_tail.txt")"
    elif ((rc != 125)); then fail_step test "rc=$rc; $(tail -1 "$OUT/pytest_tail.txt")"; fi
fi
if want bench; then
    rm -f "$OUT/pybench.jsonl"
    # shellcheck disable=SC2086  # BENCH_ARGS is a list of words
    box bench 300 "$OUT/pybench.log" "$py" bench/python_bench.py --json "$OUT/pybench.jsonl" ${BENCH_ARGS:-}
    rc=$?
    grep -vE '^\{' "$OUT/pybench.log" | grep -E '^(shape|[a-z0-9.-]+ +[0-9]+ )' >"$OUT/pybench_table.txt"
    if ((rc == 0)); then record bench OK "$(grep -c '"us"' "$OUT/pybench.jsonl") timed rows"
    elif ((rc != 125)); then fail_step bench "rc=$rc; $(tail -2 "$OUT/pybench.log" | tr '\n' ' ' | cut -c1-200)"; fi
fi
exit $FAILED
