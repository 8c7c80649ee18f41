#!/usr/bin/env bash
# The GPU check from binaries built on this machine, so that the GPU machine's minutes go to tests and timings, not to
# a build (scripts/gpu_check.sh builds there). Two halves:
#   here:  bash scripts/gpu/packed_check.sh pack [NAME]
#          strips BUILD_DIR's (build) moex, tests/moex_tests, grouped_gemm_sm90_check and weight_grad_sm90_check into
#          .gpubin/pack/NAME.tar.xz (NAME: new, the default, or before: a build of the commit to compare against).
#   there: bash scripts/gpu/packed_check.sh run [--steps tests,checks,sanitizer,bench]
#          with the device tool's carry [".deps", ".gpubin/pack"] (64 MiB in all). Packs are xz -9e: moex and
#          moex_tests share most of their bytes, so a pack is ~8.7 MB (18.5 at tar -J's default level).
# Steps: tests  moex_tests --gtest_filter=$TEST_FILTER;  checks  the sm_90a GEMMs' own checks;  sanitizer
# compute-sanitizer memcheck over $SAN_FILTER;  bench  `moex bench $BENCH_ARGS` of new, of before when it was packed
# (ABBA), and of new under each of $AB_ENV's settings ("NAME=VALUE NAME2=VALUE2", one run each), with
# compare_bench.py's table of each against new. A summary table comes last; logs and JSON go to $OUT.
# Env: OUT (.gpubin/out), BUDGET_S (560), TEST_FILTER ('*Cuda*:*cuda*'), SAN_FILTER (QuantBackendsCuda.*), BENCH_ARGS,
#      AB_ENV, AB_TEST_FILTER (the tests run again under each AB_ENV setting: '*QuantBackendsCuda*:*atched*:*CudaGraph*'),
#      MOEX_DEPS (.deps).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
PACKS=$ROOT/.gpubin/pack
MODE=${1:-}
shift || true

if [[ $MODE == pack ]]; then
    NAME=${1:-new}
    BUILD=${BUILD_DIR:-$ROOT/build}
    TMP=$(mktemp -d)
    trap 'rm -rf "$TMP"' EXIT
    for f in moex tests/moex_tests grouped_gemm_sm90_check weight_grad_sm90_check; do
        [[ -x $BUILD/$f ]] && cp "$BUILD/$f" "$TMP/" && strip "$TMP/$(basename "$f")"
    done
    [[ -x $TMP/moex ]] || { echo "packed_check: no $BUILD/moex (build first)" >&2; exit 1; }
    git -C "$ROOT" describe --always --dirty >"$TMP/PACK_COMMIT"
    mkdir -p "$PACKS"
    tar -C "$TMP" -cf - . | xz -9e -T0 >"$PACKS/$NAME.tar.xz"
    echo "packed_check: $PACKS/$NAME.tar.xz ($(du -h "$PACKS/$NAME.tar.xz" | cut -f1), $(cat "$TMP/PACK_COMMIT"))"
    exit 0
fi
[[ $MODE == run ]] || { sed -n '2,17p' "${BASH_SOURCE[0]}"; exit 2; }

STEPS="tests,checks,sanitizer,bench"
[[ "${1:-}" == "--steps" ]] && STEPS=${2:?}
OUT=${OUT:-$ROOT/.gpubin/out}
BUDGET_S=${BUDGET_S:-560}
TEST_FILTER=${TEST_FILTER:-'*Cuda*:*cuda*'}
SAN_FILTER=${SAN_FILTER:-'QuantBackendsCuda.*'}
AB_TEST_FILTER=${AB_TEST_FILTER:-'*QuantBackendsCuda*:*atched*:*CudaGraph*'}
BENCH_ARGS=${BENCH_ARGS:-"--device cuda --shapes qwen3-30b-a3b,deepseek-v3 --tokens 1,64,4096 --backends batched_mm,grouped_mm --case-seconds 0.2"}
AB_ENV=${AB_ENV:-}
# shellcheck source=scripts/gpu/lib.sh
source "$ROOT/scripts/gpu/lib.sh"
want() { [[ ",$STEPS," == *",$1,"* ]]; }
export LD_LIBRARY_PATH="${MOEX_DEPS:-$ROOT/.deps}/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
BIN=$ROOT/.gpubin/bin
for name in new before; do
    [[ -f $PACKS/$name.tar.xz ]] || continue
    rm -rf "${BIN:?}/$name" && mkdir -p "$BIN/$name" && tar -C "$BIN/$name" -xJf "$PACKS/$name.tar.xz"
done
[[ -x $BIN/new/moex ]] || { echo "packed_check: no $PACKS/new.tar.xz (run \`pack\` here first)" >&2; exit 1; }
record env INFO "new $(cat "$BIN/new/PACK_COMMIT")$([[ -d $BIN/before ]] && echo ", before $(cat "$BIN/before/PACK_COMMIT")")"
command -v nvidia-smi >/dev/null &&
    record gpu INFO "$(nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | head -1)"

gtest_counts() { grep -E '^\[  (PASSED|FAILED)  \]' "$1" | tr -s ' ' | tr '\n' ' '; }
# tests_run STEP LOG [NAME=VALUE]: moex_tests over TEST_FILTER (AB_TEST_FILTER under an A/B setting).
tests_run() {
    local step=$1 log=$2 setting=${3:-} filter=$TEST_FILTER rc
    [[ -n $setting ]] && filter=$AB_TEST_FILTER
    # shellcheck disable=SC2086  # an empty setting is no argument
    box "$step" 300 "$log" env $setting "$BIN/new/moex_tests" --gtest_filter="$filter"
    rc=$?
    ((rc == 0)) && record "$step" PASS "${setting:+$setting: }$(gtest_counts "$log")"
    ((rc != 0 && rc != 125)) && fail_step "$step" "rc=$rc; ${setting:+$setting: }$(gtest_counts "$log")"
}
if want tests; then
    tests_run tests "$OUT/tests.log"
    # Each A/B setting's code path is checked too, on the tests that reach it.
    for setting in $AB_ENV; do tests_run tests-ab "$OUT/tests-${setting//[^A-Za-z0-9_]/_}.log" "$setting"; done
fi
if want checks; then
    for c in grouped_gemm_sm90_check weight_grad_sm90_check; do
        [[ -x $BIN/new/$c ]] || continue
        box "$c" 120 "$OUT/$c.log" "$BIN/new/$c"
        rc=$?
        ((rc == 0)) && record "${c%_check}" PASS "$(tail -1 "$OUT/$c.log")"
        ((rc == 77)) && record "${c%_check}" SKIP "$(tail -1 "$OUT/$c.log")"  # no CUDA device
        ((rc != 0 && rc != 77 && rc != 125)) && fail_step "${c%_check}" "rc=$rc; $(tail -1 "$OUT/$c.log")"
    done
fi
if want sanitizer; then
    box memcheck 150 "$OUT/memcheck.log" compute-sanitizer --tool memcheck --error-exitcode 1 "$BIN/new/moex_tests" \
        --gtest_filter="$SAN_FILTER"
    rc=$?
    ((rc == 0)) && record memcheck PASS "$SAN_FILTER: $(grep -m1 'ERROR SUMMARY' "$OUT/memcheck.log")"
    ((rc != 0 && rc != 125)) && fail_step memcheck "rc=$rc; $(grep -m1 'ERROR SUMMARY' "$OUT/memcheck.log")"
fi
if want bench; then
    # bench_run LABEL BINARY_DIR [NAME=VALUE]: one `moex bench` into $OUT/bench-LABEL-N.jsonl.
    runs=0
    bench_run() {
        local label=$1 dir=$2 setting=${3:-} log
        runs=$((runs + 1))
        log="$OUT/bench-$label-$runs"
        # shellcheck disable=SC2086  # BENCH_ARGS is a list of arguments
        box "bench-$label" 150 "$log.txt" env $setting "$dir/moex" bench $BENCH_ARGS --json-file "$log.jsonl" ||
            fail_step "bench-$label" "rc=$?; see $log.txt"
    }
    if [[ -d $BIN/before ]]; then
        bench_run before "$BIN/before" && bench_run new "$BIN/new" && bench_run new "$BIN/new" &&
            bench_run before "$BIN/before"
    else
        bench_run new "$BIN/new"
    fi
    for setting in $AB_ENV; do bench_run "${setting//[^A-Za-z0-9_]/_}" "$BIN/new" "$setting"; done
    # compare_bench.py BEFORE -- AFTER: before -- new, and new -- each A/B setting.
    for label in $(find "$OUT" -name 'bench-*.jsonl' | sed -E 's#.*/bench-(.*)-[0-9]+\.jsonl#\1#' | sort -u | grep -vx new); do
        if [[ $label == before ]]; then sides=(before new); else sides=(new "$label"); fi
        # shellcheck disable=SC2046  # lists of files
        python3 "$ROOT/scripts/gpu/compare_bench.py" $(ls "$OUT"/bench-"${sides[0]}"-*.jsonl) -- \
            $(ls "$OUT"/bench-"${sides[1]}"-*.jsonl) >"$OUT/compare-$label.txt" 2>&1 &&
            record "compare" INFO "after / before = ${sides[1]} / ${sides[0]}: $OUT/compare-$label.txt"
    done
fi

echo "================ moex packed_check summary ($(($(date +%s) - START))s; logs in $OUT) ================"
cat "$SUMMARY"
first=$(find "$OUT" -name 'bench-new-*.txt' | sort | head -1)
[[ -n $first ]] && { echo "---- new: $(basename "$first") ----"; sed -n '/^shape /,$p' "$first"; }
for f in "$OUT"/compare-*.txt; do [[ -f $f ]] && { echo "---- $(basename "$f" .txt) ----"; cat "$f"; }; done
exit "$FAILED"
