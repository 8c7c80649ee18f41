#!/usr/bin/env bash
# Shared by scripts/gpu_check.sh, scripts/ep_gpu_check.sh and scripts/gpu/python_check.sh (sourced): time-boxed steps
# that always leave a summary table at the end of the output, ctest result counts, and the CMake arguments and library
# path that reach the build dependencies carried to the GPU machine in .deps (scripts/pack_deps.sh). Expects ROOT, OUT
# and BUDGET_S to be set.

START=$(date +%s)
SUMMARY="$OUT/summary.txt"
export FAILED=0  # set by fail_step; the scripts exit with it
mkdir -p "$OUT"
: >"$SUMMARY"

left() { echo $((BUDGET_S - ($(date +%s) - START))); }
record() {  # step status detail
    printf '%-11s %-8s %s\n' "$1" "$2" "$3" | tee -a "$SUMMARY"
}
fail_step() { FAILED=1; record "$1" FAIL "$2"; }
# box STEP MAX_SECONDS LOG cmd...: runs cmd within the time left; returns its status (124 timed out, 125 skipped).
box() {
    local step=$1 max=$2 log=$3 l
    shift 3
    l=$(left)
    if ((l < 15)); then record "$step" SKIP "time budget spent (BUDGET_S=$BUDGET_S)"; return 125; fi
    ((max > l - 5)) && max=$((l - 5))
    echo "== $step (<= ${max}s): $*" >>"$log"
    timeout --kill-after=5 "$max" "$@" >>"$log" 2>&1
}
# ctest's own summary line, shortened: "N tests, F failed, S skipped".
ctest_counts() {
    local line total failed skipped
    line=$(grep -E '[0-9]+% tests passed' "$1" | tail -1)
    [[ -n $line ]] || { echo "no ctest summary"; return; }
    total=$(echo "$line" | grep -Eo 'out of [0-9]+' | grep -Eo '[0-9]+')
    failed=$(echo "$line" | grep -Eo '[0-9]+ tests failed' | grep -Eo '^[0-9]+')
    skipped=$(grep -c '\*\*\*Skipped' "$1")
    echo "$total tests, ${failed:-0} failed, $skipped skipped"
}
# ctest_step STEP MAX LOG ctest-args...: one labelled ctest run with a junit file, recorded in the summary.
ctest_step() {
    local step=$1 max=$2 log=$3 rc
    shift 3
    box "$step" "$max" "$log" ctest --test-dir "$BUILD" --output-on-failure --no-tests=error \
        --output-junit "$OUT/$step.xml" "$@"
    rc=$?
    ((rc == 125)) && return
    if ((rc == 0)); then
        record "$step" PASS "$(ctest_counts "$log")"
    else
        fail_step "$step" "rc=$rc; $(ctest_counts "$log"); first: $(grep -m3 -E '\(Failed\)|\*\*\*Failed|Timeout' "$log" |
            sed -E 's/^ *[0-9]+ - //' | cut -c1-90 | tr '\n' ' ')"
    fi
}
# The CMake arguments that point find_package at .deps (headers, libraries, package files, GoogleTest's sources).
deps_cmake_args() {
    local deps=${MOEX_DEPS:-$ROOT/.deps}
    [[ -d $deps/usr ]] || return 0
    local u=$deps/usr lib=$deps/usr/lib/x86_64-linux-gnu
    printf '%s\n' "-DCMAKE_PREFIX_PATH=$u" "-Dfmt_DIR=$lib/cmake/fmt" "-Dnlohmann_json_DIR=$u/share/cmake/nlohmann_json" \
        "-DCLI11_DIR=$u/share/cmake/CLI11" "-DPCRE2_LIBRARY=$lib/libpcre2-8.so" "-DUTF8PROC_LIBRARY=$lib/libutf8proc.so"
    [[ -f $u/src/googletest/CMakeLists.txt ]] && printf '%s\n' "-DMOEX_GTEST_SOURCE_DIR=$u/src/googletest"
    return 0
}

[[ -d /usr/local/cuda/bin ]] && export PATH="/usr/local/cuda/bin:$PATH"
# The GPU machine has no libutf8proc / libpcre2 of its own: the shared libraries in .deps are found at run time.
if [[ -d ${MOEX_DEPS:-$ROOT/.deps}/usr/lib/x86_64-linux-gnu ]]; then
    export LD_LIBRARY_PATH="${MOEX_DEPS:-$ROOT/.deps}/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
